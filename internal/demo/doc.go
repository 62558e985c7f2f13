// Package demo plays the story of the fair-queues article on a real batchq
// fleet, for `batchq demo`.
//
// # The story
//
// Several tenants share one provider quota. globex (a larger plan, weight
// 3) and initech (a re-index whose jobs are ten times smaller) keep backlogs
// the whole run. acme imports its archive: five thousand summarisation jobs
// land in a few seconds, and one in eight of them is a meeting digest due
// twenty seconds later, too soon for a job deep in the import's backlog. Six
// small tenants drop by with a few documents each while the import runs, and
// a user asks the assistant every second.
//
// # The machinery
//
// Run creates its own database (dropped and created afresh on each run, and
// kept afterwards for a look), migrates it, and starts a simulated provider
// on loopback (package provider: a token bucket with OpenAI's rate-limit
// headers, 429 with Retry-After on overrun, 80-400 ms latency). Three worker
// pools, each on a connection pool of its own as separate processes would
// be, work the queue through queue.HTTPHandler and pace themselves from one
// shared throttle (Client.Throttle, one row of batchq.quota); interactive
// calls go through the same throttle with queue.CallInteractive. Speed
// scales the provider's refill and latency, the arrivals, the deadlines and
// the interactive calls, so the same story plays in less time.
//
// # What it shows
//
// While the story plays, a live table per tenant (done, queued, expired,
// tokens, recent share, p95 wait) and the quota's state, redrawn in place on
// a terminal or printed as plain blocks otherwise. At the end, a Report
// computed from the database's outcome and job rows: small tenants' waits
// against the import's backlog (and against what one FIFO queue would have
// made them wait), token shares against weights while the steady tenants
// were all backlogged, expired jobs recorded and never sent, 429s, and the
// interactive calls' waits; and a chart of each tenant's token share over
// time (package sharechart, which the web console draws its charts with).
// With Config.ConsoleAddr it also serves the web console over its database
// while the story plays, and prints where.
package demo
