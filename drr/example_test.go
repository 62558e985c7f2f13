package drr_test

import (
	"fmt"
	"time"

	"github.com/batchq/batchq/drr"
)

// A large import does not hold up a tenant that arrives after it, and a job
// larger than one grant waits until its tenant's deficit covers it.
func ExampleQueue() {
	q, err := drr.New[string](drr.Config{Quantum: 100, MaxPerTenant: 1000})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	for i := range 4 {
		_ = q.EnqueueAt(now, drr.Job[string]{Tenant: "acme", Cost: 100, Value: fmt.Sprint("import ", i)})
	}
	_ = q.EnqueueAt(now, drr.Job[string]{Tenant: "globex", Cost: 100, Value: "report"})
	_ = q.EnqueueAt(now, drr.Job[string]{Tenant: "globex", Cost: 200, Value: "summary"})

	for {
		j, ok := q.DequeueAt(now, nil)
		if !ok {
			break
		}
		fmt.Printf("%s: %s\n", j.Tenant, j.Value)
	}
	// Output:
	// acme: import 0
	// globex: report
	// acme: import 1
	// acme: import 2
	// globex: summary
	// acme: import 3
}

// Jobs past their deadline are reported, not returned.
func ExampleQueue_DequeueAt() {
	q, err := drr.New[string](drr.Config{Quantum: 100, MaxPerTenant: 10, DefaultTTL: time.Hour})
	if err != nil {
		panic(err)
	}
	enqueued := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	_ = q.EnqueueAt(enqueued, drr.Job[string]{Tenant: "acme", Cost: 10, Value: "standup summary", Deadline: enqueued.Add(time.Minute)})
	_ = q.EnqueueAt(enqueued, drr.Job[string]{Tenant: "acme", Cost: 10, Value: "nightly digest"}) // DefaultTTL

	j, ok := q.DequeueAt(enqueued.Add(5*time.Minute), func(j drr.Job[string]) {
		fmt.Println("expired:", j.Value)
	})
	fmt.Println(j.Value, ok, "until", j.Deadline.Format(time.Kitchen))
	// Output:
	// expired: standup summary
	// nightly digest true until 10:00AM
}
