package demo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The story's numbers, in story time (a run at speed s plays them s times
// faster). They are chosen so that the provider's quota, not the workers,
// sets the pace: about 12,000 tokens a second, of which the batch fleet may
// use all but the 20% reserve.
const (
	// The provider: a token bucket of 60,000 tokens and 300 requests that
	// refills over 5 s, answering in 80-400 ms.
	providerTokens   = 60_000
	providerRequests = 300
	providerWindow   = 5 * time.Second
	providerLatency  = 80 * time.Millisecond
	providerJitter   = 320 * time.Millisecond
	// reserve is the fraction of the quota batch work leaves to interactive calls.
	reserve = 0.2
	// quantum is the queue's DRR quantum: a tenant of weight 1 gets this many
	// tokens per round.
	quantum = 1000

	// The import lands importJobs jobs in importBatches batches over
	// importSpread, starting at importAt.
	importAt      = 2 * time.Second
	importJobs    = 5000
	importBatches = 20
	importSpread  = 5 * time.Second

	// A quarter into the story, newsroom asks for digestJobs meeting digests
	// due digestTTL later (a third of the story at most): more than its fair
	// share can run in that time, so the rest expire.
	digestJobs = 60
	digestTTL  = 20 * time.Second

	// Backlogs that last the whole run: jobs per second of story.
	planJobsPerSecond    = 15 // globex, weight 3, jobs of about 1,000 tokens
	reindexJobsPerSecond = 25 // initech, weight 1, jobs of about 150 tokens

	// Each small tenant submits smallVisits batches of 1..smallMaxJobs jobs.
	smallVisits  = 2
	smallMaxJobs = 4

	// A user asks the assistant every interactiveEvery; each call costs
	// 1,000-2,000 tokens.
	interactiveEvery = time.Second
)

// The tenants of the story.
const (
	importTenant  = "acme"
	planTenant    = "globex"
	reindexTenant = "initech"
	digestTenant  = "newsroom"
)

var smallTenants = []string{"bakery", "clinic", "florist", "garage", "library", "school"}

// Roles say what a tenant does in the story.
const (
	roleImport  = "import"
	rolePlan    = "plan ×3"
	roleReindex = "re-index"
	roleSmall   = "small"
	roleDigest  = "deadlines"
)

// tenantPlan is one tenant of the story.
type tenantPlan struct {
	Name   string
	Role   string
	Weight float64
	// Steady tenants keep a backlog the whole run, so their token shares
	// are compared with their weights.
	Steady bool
}

// plannedJob is one job a tenant submits.
type plannedJob struct {
	Kind string
	Cost int64
	TTL  time.Duration // story time; 0: the queue's default
}

// arrival is a batch of jobs one tenant submits at story time At.
type arrival struct {
	At     time.Duration
	Tenant string
	Jobs   []plannedJob
}

// story is what happens in a run: who the tenants are, and who submits what
// when. It is a pure function of its length and seed.
type story struct {
	Tenants  []tenantPlan
	Arrivals []arrival // by At
	// DigestTTL is how long newsroom's digests have.
	DigestTTL time.Duration
}

// newStory writes the story of a run of the given length (story time).
func newStory(length time.Duration, seed uint64) story {
	rng := rand.New(rand.NewPCG(seed, 0x62617463))
	cost := func(lo, hi int64) int64 { return lo + rng.Int64N(hi-lo+1) }
	s := story{Tenants: []tenantPlan{
		{Name: importTenant, Role: roleImport, Weight: 1, Steady: true},
		{Name: planTenant, Role: rolePlan, Weight: 3, Steady: true},
		{Name: reindexTenant, Role: roleReindex, Weight: 1, Steady: true},
		{Name: digestTenant, Role: roleDigest, Weight: 1},
	}}
	for _, name := range smallTenants {
		s.Tenants = append(s.Tenants, tenantPlan{Name: name, Role: roleSmall, Weight: 1})
	}

	// globex's nightly summaries and initech's re-index are already queued
	// when the story starts, enough to last the run.
	seconds := max(1, int(length/time.Second))
	var plan, reindex []plannedJob
	for range planJobsPerSecond * seconds {
		plan = append(plan, plannedJob{Kind: "summarise", Cost: cost(600, 1400)})
	}
	for range reindexJobsPerSecond * seconds {
		reindex = append(reindex, plannedJob{Kind: "embed", Cost: cost(100, 200)})
	}
	s.Arrivals = append(s.Arrivals, chunked(0, planTenant, plan, 500)...)
	s.Arrivals = append(s.Arrivals, chunked(0, reindexTenant, reindex, 500)...)

	// acme imports its archive: thousands of summaries land in a few seconds.
	per := importJobs / importBatches
	for b := range importBatches {
		a := arrival{At: importAt + importSpread*time.Duration(b)/importBatches, Tenant: importTenant}
		for range per {
			a.Jobs = append(a.Jobs, plannedJob{Kind: "summarise", Cost: cost(1000, 2000)})
		}
		s.Arrivals = append(s.Arrivals, a)
	}

	// newsroom's digests all share one deadline, too soon for all of them:
	// those its share cannot reach in time expire together.
	s.DigestTTL = min(digestTTL, length/3)
	digests := arrival{At: length / 4, Tenant: digestTenant}
	for range digestJobs {
		digests.Jobs = append(digests.Jobs, plannedJob{Kind: "digest", Cost: cost(1000, 2000), TTL: s.DigestTTL})
	}
	s.Arrivals = append(s.Arrivals, digests)

	// Small tenants drop by with a few documents each while the import runs.
	lo := min(importAt+importSpread+time.Second, length/3)
	hi := length * 9 / 10
	for _, name := range smallTenants {
		for range smallVisits {
			a := arrival{At: lo + time.Duration(rng.Int64N(int64(hi-lo)+1)), Tenant: name}
			for range 1 + rng.IntN(smallMaxJobs) {
				a.Jobs = append(a.Jobs, plannedJob{Kind: "summarise", Cost: cost(300, 1500)})
			}
			s.Arrivals = append(s.Arrivals, a)
		}
	}
	slices.SortStableFunc(s.Arrivals, func(a, b arrival) int { return int(a.At - b.At) })
	return s
}

// chunked splits one tenant's jobs into arrivals of at most n jobs at at.
func chunked(at time.Duration, tenant string, jobs []plannedJob, n int) []arrival {
	var out []arrival
	for len(jobs) > 0 {
		k := min(n, len(jobs))
		out = append(out, arrival{At: at, Tenant: tenant, Jobs: jobs[:k]})
		jobs = jobs[k:]
	}
	return out
}

// tenant returns the plan of the named tenant.
func (s story) tenant(name string) (tenantPlan, bool) {
	for _, t := range s.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return tenantPlan{}, false
}

// weights returns each tenant's weight.
func (s story) weights() map[string]float64 {
	w := make(map[string]float64, len(s.Tenants))
	for _, t := range s.Tenants {
		w[t.Name] = t.Weight
	}
	return w
}

// steady returns the tenants that keep a backlog the whole run, in story
// order.
func (s story) steady() []string {
	var out []string
	for _, t := range s.Tenants {
		if t.Steady {
			out = append(out, t.Name)
		}
	}
	return out
}

// initial returns the arrivals at the start: the backlogs already waiting.
func (s story) initial() []arrival {
	var out []arrival
	for _, a := range s.Arrivals {
		if a.At <= 0 {
			out = append(out, a)
		}
	}
	return out
}

// later returns the arrivals after the start.
func (s story) later() []arrival {
	var out []arrival
	for _, a := range s.Arrivals {
		if a.At > 0 {
			out = append(out, a)
		}
	}
	return out
}

// jobCount is how many jobs the story submits in all.
func (s story) jobCount() int {
	n := 0
	for _, a := range s.Arrivals {
		n += len(a.Jobs)
	}
	return n
}

func (j plannedJob) payload(tenant string, n int64) []byte {
	return fmt.Appendf(nil, `{"tokens":%d,"task":%q,"doc":"%s/doc-%05d"}`, j.Cost, j.Kind, tenant, n)
}
