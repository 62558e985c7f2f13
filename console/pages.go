package console

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batchq/batchq/internal/together"
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
	Reserve *int64 // tokens the reserve keeps for interactive calls; nil without a known limit
	Paused  bool
	Limited int64 // 429s in the last hour
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
	// Four independent reads, at once: the page waits for the slowest, not
	// their sum.
	var (
		qs      []queue.QueueSummary
		counts  []queue.OutcomeCount
		quota   []queue.QuotaRow
		limited map[string]int64
	)
	err := together.All(
		func() (err error) { qs, err = s.c.QueueSummaries(ctx); return err },
		func() (err error) {
			counts, err = s.c.OutcomeCounts(ctx, now.Add(-time.Hour), now.Add(time.Minute), "")
			return err
		},
		func() (err error) { quota, err = s.c.Quota(ctx); return err },
		func() (err error) { limited, err = s.c.RateLimitedCounts(ctx, now.Add(-time.Hour)); return err },
	)
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
	CanPause   bool   // whether the console's role may pause and resume queues (the operator's right)
}

func (s *server) queuePage(r *http.Request) (string, any, error) {
	ctx := r.Context()
	name := r.PathValue("queue")
	wname, span, err := window(r)
	if err != nil {
		return "", nil, err
	}
	q, err := s.queue(r, name)
	if err != nil {
		return "", nil, err
	}
	now := s.o.Now()
	rows, err := s.c.TenantShares(ctx, name, now.Add(-span), now, s.o.TopTenants)
	if err != nil {
		return "", nil, err
	}
	var priv queue.ReadPrivileges
	if s.showsForms(r) {
		if priv, err = s.c.Privileges(ctx); err != nil {
			return "", nil, err
		}
	}
	// The queue's totals are its tenants' rows summed.
	p := queuePage{Name: name, PausedAt: q.PausedAt, Window: wname, Top: s.o.TopTenants, ExactLimit: queue.ExactCountLimit,
		Summary: queue.QueueSummary{QueuedExact: true}, CanPause: priv.Pause}
	for _, w := range windows {
		p.Windows = append(p.Windows, w.Name)
	}
	for i := range rows {
		r := rows[i]
		p.Summary.QueuedJobs += r.QueuedJobs
		p.Summary.QueuedExact = p.Summary.QueuedExact && r.QueuedExact
		p.Summary.QueuedTokens += r.QueuedTokens
		p.Summary.RunningJobs += r.RunningJobs
		p.Summary.ScheduledJobs += r.ScheduledJobs
		if r.Tenant == "" {
			p.Others = &rows[i]
			continue
		}
		p.Rows = append(p.Rows, r)
	}
	p.Chart = s.o.BasePath + "/queues/" + pathEscape(name) + "/chart.svg?window=" + wname + "&at=" + strconv.FormatInt(now.UnixMilli(), 10)
	return "Queue " + name, p, nil
}

// showsForms reports whether r's page shows its actions' forms: the whole
// page, not its live part, to a signed-in browser. Only then does a page
// ask which actions the console's role may take.
func (s *server) showsForms(r *http.Request) bool {
	return r.Header.Get(liveHeader) == "" && s.auth.session(r) != ""
}

// queue returns one queue's settings, or a 404 for no such queue.
func (s *server) queue(r *http.Request, name string) (queue.QueueConfig, error) {
	q, err := s.c.Queue(r.Context(), name)
	if errors.Is(err, queue.ErrUnknownQueue) {
		return q, errorf(http.StatusNotFound, "no queue %q", name)
	}
	return q, err
}

type tenantPage struct {
	Queue, Tenant string
	Backlog       queue.BacklogRow
	Exact         bool // Backlog.QueuedJobs was counted, not the ledger's upper bound
	Settings      queue.TenantInQueue
	Outcomes      []queue.AuditRow
	Counts        []int64 // of the last hour, by outcomeNames
	Names         []string
	CanCancel     bool // whether the console's role may cancel jobs (the operator's right)
	CanSet        bool // whether it may change tenants' settings (the schema owner's)
	// AsOf is when the page read the tenant's jobs: the cancel form takes
	// only jobs enqueued before it, which the page could have counted.
	AsOf time.Time
}

// AsOfText is AsOf as the cancel form carries it.
func (p tenantPage) AsOfText() string { return p.AsOf.UTC().Format(time.RFC3339Nano) }

// CancelTotal is how many unfinished jobs cancelling the tenant's would
// take now: the dry run the cancel form confirms.
func (p tenantPage) CancelTotal() int64 {
	return p.Backlog.QueuedJobs + p.Backlog.ScheduledJobs + p.Backlog.RunningJobs
}

func (s *server) tenantPage(r *http.Request) (string, any, error) {
	ctx := r.Context()
	qn, tn := r.PathValue("queue"), pathName(r, "tenant")
	// Five independent reads, at once.
	var (
		st     queue.TenantInQueue
		b      queue.BacklogRow
		exact  bool
		outs   []queue.AuditRow
		counts []queue.OutcomeCount
		priv   queue.ReadPrivileges
	)
	now := s.o.Now()
	err := together.All(
		func() (err error) { st, err = s.c.TenantInQueueSettings(ctx, qn, tn); return err },
		func() (err error) { b, exact, err = s.c.TenantBacklog(ctx, qn, tn); return err },
		func() (err error) {
			outs, err = s.c.Outcomes(ctx, &queue.OutcomesOpts{Queue: qn, Tenant: tn, Since: now.Add(-24 * time.Hour), Limit: 50})
			return err
		},
		func() (err error) {
			counts, err = s.c.OutcomeCounts(ctx, now.Add(-time.Hour), now.Add(time.Minute), tn)
			return err
		},
		func() (err error) { priv, err = s.c.Privileges(ctx); return err },
	)
	var se *queue.SettingError
	switch {
	case errors.As(err, &se):
		return "", nil, errorf(http.StatusBadRequest, "no tenant can be named so: a tenant's name %s", se.Rule)
	case errors.Is(err, queue.ErrUnknownTenant):
		return "", nil, errorf(http.StatusNotFound,
			"no tenant %q in queue %q: it has no jobs, settings or outcomes of the last day there", tn, qn)
	case err != nil:
		return "", nil, err
	}
	p := tenantPage{Queue: qn, Tenant: tn, Backlog: b, Exact: exact, Settings: st, Outcomes: outs, Names: outcomeNames,
		Counts: make([]int64, len(outcomeNames)), AsOf: now}
	for _, c := range counts {
		for i, name := range outcomeNames {
			if c.Queue == qn && c.Outcome == name {
				p.Counts[i] = c.Jobs
			}
		}
	}
	// The dry run of a cancel, from the backlog just read; the action
	// counts again and cancels nothing if more jobs came since.
	p.CanCancel, p.CanSet = priv.Cancel, priv.Settings
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
	MayRetry bool   // whether the console's role may retry jobs (the schema owner's right)
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
	p := jobPage{ID: id, MayRetry: priv.Retry}
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
		return 0, errorf(http.StatusBadRequest, "job id %q: must be a whole number from 1 to %d", r.PathValue("id"), int64(math.MaxInt64))
	}
	return id, nil
}

func (s *server) loginPage(r *http.Request) (string, any, error) {
	if !s.auth.enabled() {
		return "", nil, errorf(http.StatusNotFound, "the console is read-only: it was started without a token, so there is nothing to sign in to")
	}
	return "Sign in", r.URL.Query().Get("next"), nil
}
