// Package queue is batchq's Postgres-backed fair work queue.
//
// Jobs are rows in the batchq schema. Each has a queue, a tenant, a kind, an
// estimated cost (tokens), a deadline and a JSON payload. Applications insert
// them inside their own transaction (EnqueueTx), so a job exists exactly when
// the change that wanted it commits; each tenant's backlog is bounded, and a
// full tenant gets a *QueueFullError while other tenants carry on.
//
// # Fair order
//
// Workers claim jobs in deficit-round-robin order across tenants, by cost and
// by weight: a tenant with ten thousand queued jobs gets the same share of each
// round as a tenant with one. The order is a sort key computed when a job is
// queued. A tenant that joins the ring (has queued jobs again) gets the next
// ring position and starts in the round of the latest claim, or in the next
// round if its previous jobs reached that one (so a chain of jobs, each
// enqueueing the next, gets a turn a round and no more); its job whose
// cumulative cost since joining is C is served on its visit ceil(C / share),
// where share is round(quantum × weight), at least 1. Claiming is then one
// index range scan over (round, position, id) with FOR UPDATE SKIP LOCKED:
// any number of workers in any number of processes claim at once, the scan
// never waits on a row an application's open transaction holds, and a job
// costing far more than the quantum needs no futile rounds. With one claimer
// taking one job at a time, the order is exactly that of package drr once
// Maintain has folded the corrections below (the cost of a job that expired
// or was cancelled reaches its tenant's later jobs at the next pass).
//
// Actual costs reported at completion, and the cost of jobs dropped before
// they ran, are recorded as ledger adjustments that Maintain folds into the
// tenant's queued keys, so fairness follows real tokens without the
// completion path contending with claims. A tenant whose queue empties leaves
// the ring and starts afresh when it returns: idle tenants bank no credit.
//
// # Lifecycle
//
// A claimed job is running under a lease. Complete, Fail, Release and Cancel
// each remove or update the job and write its outcome row in one transaction;
// every finished job has exactly one row in batchq.outcomes. A finish whose
// lease token is stale (the lease expired and the job was rescued) returns
// ErrLeaseLost and changes nothing. Failed attempts wait in the 'retrying'
// state with exponential backoff, then rejoin their tenant's queue; Release
// does the same without using an attempt. Jobs past their deadline are never
// claimed: a claim that reaches one records it as expired, and Maintain also
// expires jobs deep in a backlog and rescues jobs whose lease expired.
//
// # Later and recurring
//
// A job with NewJob.RunAt (or Delay) waits in the 'scheduled' state, outside
// the fair order, and counts toward its tenant's bound. Maintain moves due
// scheduled jobs, as it moves retries whose backoff ended, to the end of
// their tenants' queues, keyed as jobs enqueued at that moment: waiting never
// buys a place. A Schedule stored in the database (CreateSchedule) enqueues
// one job at every tick of a cron expression; Maintain fires due ticks, and
// a unique key per schedule and tick keeps a tick to one job however many
// workers race for it.
//
// # Workers and the two paths
//
// Client.Work runs a pool of handlers on a queue: it claims in fair order in
// batches, the next claim running while the handlers work through the last,
// heartbeats long jobs, records outcomes through a batching completer and
// shuts down gracefully. HTTPHandler is the handler behind
// `batchq work`: it POSTs each payload to an endpoint and maps the answer to
// an outcome.
//
// Batch work and interactive calls share one provider quota. With a
// throttle from Client.Throttle, every worker of every process paces from
// one row of batchq.quota: the pool claims only what the throttle admits at
// batch priority, leaves the reserve alone, feeds it every response, and
// stops after a 429 until the provider's reset. Code serving a waiting user
// calls CallInteractive with the same quota key, which may use the reserve
// and never waits behind queued jobs.
//
// # Concurrency
//
// A Client is safe for concurrent use by any number of goroutines; all of its
// state is in the database.
package queue
