package demo

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// collect reads every job of the run from the database.
func (r *runner) collect(ctx context.Context) ([]jobRecord, error) {
	q := dbsqlc.New()
	outs, err := q.DemoOutcomes(ctx, r.db, queueName)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: read outcomes: %w", err)
	}
	left, err := q.DemoUnfinished(ctx, r.db, queueName)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: read jobs: %w", err)
	}
	jobs := make([]jobRecord, 0, len(outs)+len(left))
	for _, o := range outs {
		j := jobRecord{
			ID: o.JobID, Tenant: o.Tenant, Kind: o.Kind, Cost: o.EstimatedCost, Outcome: o.Outcome,
			Enqueued: o.EnqueuedAt, Finished: o.FinishedAt,
		}
		if o.ActualCost != nil {
			j.Cost = *o.ActualCost
		}
		if o.FirstClaimedAt != nil {
			j.Claimed = *o.FirstClaimedAt
		}
		jobs = append(jobs, j)
	}
	for _, l := range left {
		j := jobRecord{ID: l.ID, Tenant: l.Tenant, Kind: l.Kind, Cost: l.Cost, Enqueued: l.EnqueuedAt}
		if l.FirstClaimedAt != nil {
			j.Claimed = *l.FirstClaimedAt
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// report builds the final report from the database and what the provider
// and the interactive calls recorded.
func (r *runner) report(ctx context.Context, stop time.Time) (*Report, []jobRecord, error) {
	jobs, err := r.collect(ctx)
	if err != nil {
		return nil, nil, err
	}
	charged := map[int64]bool{}
	for _, j := range jobs {
		if j.Outcome != "expired" {
			continue
		}
		for _, req := range r.sim.JobLog(strconv.FormatInt(j.ID, 10)) {
			charged[j.ID] = charged[j.ID] || req.Admitted
		}
	}
	stats := r.sim.Stats()
	rep := buildReport(r.story, runData{
		Jobs: jobs, Start: r.start, Stop: stop, Enqueued: int(r.enqueued.Load()),
		Calls: r.calls(), Charged: charged,
	})
	rep.Database = r.cfg.DatabaseName
	rep.DatabaseURL = databaseURL(r.cfg.DatabaseURL, r.cfg.DatabaseName)
	rep.Speed = r.cfg.Speed
	rep.DigestTTL = r.speed(r.story.DigestTTL)
	rep.Provider = ProviderReport{
		URL: r.target, Requests: stats.Requests, OK: stats.OK, TooManyRequests: stats.TooManyRequests,
		Errors: stats.ClientErrors + stats.ServerErrors, TokensCharged: stats.TokensCharged,
		Utilization: r.sim.Utilization(r.start, stop).TokenShare(),
		FleetPauses: r.fleetPauses.Load(),
	}
	rep.WorkerErrors = r.workerErrors.Load()
	if msg := r.lastErr.Load(); msg != nil {
		rep.LastWorkerErr = *msg
	}
	return rep, jobs, nil
}

// runData is what a run recorded, for buildReport.
type runData struct {
	Jobs        []jobRecord
	Start, Stop time.Time
	Enqueued    int
	Calls       []call
	// Charged holds the expired jobs the provider charged for a call.
	Charged map[int64]bool
}

// buildReport computes the report's claims from what a run recorded.
func buildReport(st story, d runData) *Report {
	rep := &Report{Start: d.Start, Stop: d.Stop, Enqueued: d.Enqueued, Outcomes: map[string]int{}}
	tenants := map[string]*TenantReport{}
	var order []string
	tenantOf := func(name string) *TenantReport {
		t, ok := tenants[name]
		if !ok {
			plan, _ := st.tenant(name)
			t = &TenantReport{Name: name, Role: plan.Role, Weight: plan.Weight}
			tenants[name] = t
			order = append(order, name)
		}
		return t
	}
	for _, p := range st.Tenants {
		tenantOf(p.Name)
	}
	byTenant := map[string][]jobRecord{}
	for _, j := range d.Jobs {
		t := tenantOf(j.Tenant)
		byTenant[j.Tenant] = append(byTenant[j.Tenant], j)
		t.Enqueued++
		switch j.Outcome {
		case "":
			t.Waiting++
			rep.Unfinished++
		case "succeeded":
			t.Done++
		case "failed", "discarded":
			t.Failed++
		case "expired":
			t.Expired++
			rep.Expired++
			rep.ExpiredTokens += j.Cost
			if d.Charged[j.ID] {
				rep.ExpiredCharged++
			}
		}
		if j.Outcome != "" {
			rep.Outcomes[j.Outcome]++
		}
		if j.spent() {
			t.Tokens += j.Cost
		}
		if j.Tenant == digestTenant {
			rep.Digests++
			if j.spent() {
				rep.DigestsInTime++
			}
		}
	}
	for _, name := range order {
		t := tenants[name]
		var claimed []jobRecord
		for _, j := range byTenant[name] {
			if !j.Claimed.IsZero() {
				claimed = append(claimed, j)
			}
		}
		t.Waits = summarise(waits(claimed, d.Stop))
		rep.Tenants = append(rep.Tenants, *t)
	}

	var small []jobRecord
	for _, name := range smallTenants {
		small = append(small, byTenant[name]...)
	}
	rep.Small = summarise(waits(small, d.Stop))
	for _, j := range byTenant[importTenant] {
		if j.Outcome == "" {
			rep.ImportQueued++
			rep.ImportOldest = max(rep.ImportOldest, d.Stop.Sub(j.Enqueued))
		}
	}
	rep.ThroughputRate = throughput(d.Jobs, Span{d.Start, d.Stop})
	rep.FIFO = summarise(fifoWaits(d.Jobs, small, rep.ThroughputRate))

	steady := st.steady()
	if w, ok := allBacklogged(d.Jobs, steady, d.Stop); ok {
		rep.Backlogged = w
		rep.Shares, rep.OtherTokens = sharesIn(d.Jobs, w, steady, st.weights())
	}

	var waited, total []time.Duration
	for _, c := range d.Calls {
		rep.Interactive.Calls++
		if c.status == http.StatusOK {
			rep.Interactive.OK++
		} else {
			rep.Interactive.Failed++
		}
		sent := c.sent
		if sent.IsZero() {
			sent = c.done
		}
		waited = append(waited, sent.Sub(c.asked))
		total = append(total, c.done.Sub(c.asked))
	}
	rep.Interactive.WaitP50, rep.Interactive.WaitP99 = percentile(waited, 50), percentile(waited, 99)
	rep.Interactive.TotalP50, rep.Interactive.TotalP99 = percentile(total, 50), percentile(total, 99)
	return rep
}
