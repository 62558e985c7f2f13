package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batchq/batchq/queue"
)

// outcomeNames are the outcomes, in the order the pages show them.
var outcomeNames = []string{"succeeded", "failed", "expired", "discarded", "cancelled"}

// windows are the spans a queue's page may look back over.
var windows = []struct {
	Name string
	D    time.Duration
}{{"1m", time.Minute}, {"5m", 5 * time.Minute}, {"15m", 15 * time.Minute}, {"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}}

// window reads the page's ?window=, DefaultWindow without one.
func window(r *http.Request) (string, time.Duration, error) {
	w := r.URL.Query().Get("window")
	if w == "" {
		return "15m", DefaultWindow, nil
	}
	var names []string
	for _, x := range windows {
		if x.Name == w {
			return x.Name, x.D, nil
		}
		names = append(names, x.Name)
	}
	return "", 0, errorf(http.StatusBadRequest, "window %q: must be one of %s", w, strings.Join(names, ", "))
}

type overviewQueue struct {
	queue.QueueSummary
	Outcomes []int64 // by outcomeNames
}

type overviewQuota struct {
	queue.QuotaRow
	Reserve   *int64 // tokens the reserve keeps for interactive calls; nil without a known limit
	Paused    bool
	Limited   int64 // 429s in the last hour
	HasLimits bool
}

type overviewPage struct {
	Queues   []overviewQueue
	Outcomes []string
	Quota    []overviewQuota
	Reserve  float64
}

func (s *server) overview(r *http.Request) (string, any, error) {
	ctx := r.Context()
	now := s.o.Now()
	qs, err := s.c.QueueSummaries(ctx)
	if err != nil {
		return "", nil, err
	}
	counts, err := s.c.OutcomeCounts(ctx, now.Add(-time.Hour), now.Add(time.Minute), "")
	if err != nil {
		return "", nil, err
	}
	p := overviewPage{Outcomes: outcomeNames, Reserve: s.o.Reserve}
	for _, q := range qs {
		oq := overviewQueue{QueueSummary: q, Outcomes: make([]int64, len(outcomeNames))}
		for _, c := range counts {
			if c.Queue != q.Name {
				continue
			}
			for i, name := range outcomeNames {
				if c.Outcome == name {
					oq.Outcomes[i] = c.Jobs
				}
			}
		}
		p.Queues = append(p.Queues, oq)
	}
	quota, err := s.c.Quota(ctx)
	if err != nil {
		return "", nil, err
	}
	limited, err := s.c.RateLimitedCounts(ctx, now.Add(-time.Hour))
	if err != nil {
		return "", nil, err
	}
	for _, q := range quota {
		oq := overviewQuota{QuotaRow: q, Paused: q.PausedUntil != nil && q.PausedUntil.After(now), Limited: limited[q.Key]}
		if q.TokensLimit != nil {
			res := int64(float64(*q.TokensLimit) * s.o.Reserve)
			oq.Reserve = &res
		}
		p.Quota = append(p.Quota, oq)
	}
	return "Overview", p, nil
}

type queuePage struct {
	Name       string
	PausedAt   *time.Time
	Window     string
	Windows    []string
	Rows       []queue.TenantShareRow
	Others     *queue.TenantShareRow
	Summary    queue.QueueSummary
	Top        int
	ExactLimit int
	Chart      string // the chart's URL, which changes with every refresh
}

func (s *server) queuePage(r *http.Request) (string, any, error) {
	ctx := r.Context()
	name := r.PathValue("queue")
	wname, span, err := window(r)
	if err != nil {
		return "", nil, err
	}
	sum, err := s.summary(r, name)
	if err != nil {
		return "", nil, err
	}
	now := s.o.Now()
	rows, err := s.c.TenantShares(ctx, name, now.Add(-span), now, s.o.TopTenants)
	if err != nil {
		return "", nil, err
	}
	p := queuePage{Name: name, PausedAt: sum.PausedAt, Window: wname, Summary: sum, Top: s.o.TopTenants, ExactLimit: queue.ExactCountLimit}
	for _, w := range windows {
		p.Windows = append(p.Windows, w.Name)
	}
	for i := range rows {
		if rows[i].Tenant == "" {
			p.Others = &rows[i]
			continue
		}
		p.Rows = append(p.Rows, rows[i])
	}
	p.Chart = s.o.BasePath + "/queues/" + pathEscape(name) + "/chart.svg?window=" + wname + "&at=" + strconv.FormatInt(now.UnixMilli(), 10)
	return "Queue " + name, p, nil
}

// summary returns one queue's summary, or a 404 for no such queue.
func (s *server) summary(r *http.Request, name string) (queue.QueueSummary, error) {
	qs, err := s.c.QueueSummaries(r.Context())
	if err != nil {
		return queue.QueueSummary{}, err
	}
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
	}
	return queue.QueueSummary{}, errorf(http.StatusNotFound, "no queue %q", name)
}

type tenantPage struct {
	Queue, Tenant string
	Backlog       queue.BacklogRow
	Exact         bool // Backlog.QueuedJobs was counted, not the ledger's upper bound
	Settings      queue.TenantInQueue
	Outcomes      []queue.AuditRow
	Counts        []int64 // of the last hour, by outcomeNames
	Names         []string
	Cancel        queue.JobCount // what cancelling would cancel: the dry run
	CanCount      bool           // whether the role may count (the dry run needs the operator's rights)
	CountErr      string
}

func (s *server) tenantPage(r *http.Request) (string, any, error) {
	ctx := r.Context()
	qn, tn := r.PathValue("queue"), r.PathValue("tenant")
	st, err := s.c.TenantInQueueSettings(ctx, qn, tn)
	if err != nil {
		return "", nil, err
	}
	b, exact, err := s.c.TenantBacklog(ctx, qn, tn)
	if err != nil {
		return "", nil, err
	}
	now := s.o.Now()
	outs, err := s.c.Outcomes(ctx, &queue.OutcomesOpts{Queue: qn, Tenant: tn, Since: now.Add(-24 * time.Hour), Limit: 50})
	if err != nil {
		return "", nil, err
	}
	counts, err := s.c.OutcomeCounts(ctx, now.Add(-time.Hour), now.Add(time.Minute), tn)
	if err != nil {
		return "", nil, err
	}
	p := tenantPage{Queue: qn, Tenant: tn, Backlog: b, Exact: exact, Settings: st, Outcomes: outs, Names: outcomeNames,
		Counts: make([]int64, len(outcomeNames))}
	for _, c := range counts {
		for i, name := range outcomeNames {
			if c.Queue == qn && c.Outcome == name {
				p.Counts[i] = c.Jobs
			}
		}
	}
	// The dry run of a cancel: what it would take now.
	p.Cancel, err = s.c.CountJobs(ctx, queue.JobFilter{Queue: qn, Tenant: tn})
	if err == nil {
		p.CanCount = true
	} else if status, msg := classify(err); status == http.StatusForbidden {
		p.CountErr = msg
	} else {
		return "", nil, err
	}
	return "Tenant " + tn + " in " + qn, p, nil
}

type jobPage struct {
	ID       int64
	Info     *queue.JobInfo  // the whole record, when the role may read it
	Audit    *queue.AuditRow // a finished job's outcome without payload or result
	Payload  string          // "" when hidden or empty
	Result   string
	Hidden   string // why the payload and result are not shown
	CanRetry bool   // a finished job that did not succeed, or a retrying one
}

func (s *server) jobPage(r *http.Request) (string, any, error) {
	ctx := r.Context()
	id, err := jobID(r)
	if err != nil {
		return "", nil, err
	}
	priv, err := s.c.Privileges(ctx)
	if err != nil {
		return "", nil, err
	}
	p := jobPage{ID: id}
	if priv.Jobs && priv.Payloads && priv.Results {
		info, err := s.c.JobInfo(ctx, id)
		if err != nil {
			return "", nil, err
		}
		p.Info = &info
		p.Payload, p.Result = string(info.Payload), string(info.Result)
		p.CanRetry = info.State == "retrying" || info.Finished && info.State != "succeeded"
		return "Job " + strconv.FormatInt(id, 10), p, nil
	}
	p.Hidden = "the console's database role may not read payloads and results (docs/sql-api.md#roles)"
	a, err := s.c.Outcome(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return "", nil, errorf(http.StatusNotFound,
			"no outcome of job %d; the console's database role may not read unfinished jobs, so it may be one", id)
	}
	if err != nil {
		return "", nil, err
	}
	p.Audit = &a
	p.CanRetry = a.Outcome != "succeeded"
	return "Job " + strconv.FormatInt(id, 10), p, nil
}

func jobID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, errorf(http.StatusBadRequest, "job id %q: must be a positive whole number", r.PathValue("id"))
	}
	return id, nil
}

func (s *server) loginPage(r *http.Request) (string, any, error) {
	if !s.auth.enabled() {
		return "", nil, errorf(http.StatusNotFound, "the console is read-only: it was started without a token, so there is nothing to sign in to")
	}
	return "Sign in", r.URL.Query().Get("next"), nil
}
