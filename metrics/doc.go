// Package metrics exports what batchq's operators monitor as Prometheus
// metrics: a Collector fed by worker pools' events (WorkerConfig.OnEvent)
// and by interactive calls, plus gauges it reads from the database when it
// is scraped.
//
// A Collector is safe for concurrent use. Register it with a
// prometheus.Registerer and serve the registry with promhttp; `batchq work
// --metrics-addr` does exactly that.
//
// # From events
//
// Counters and histograms, in this process, from the pools wired to
// [Collector.OnEvent], the calls made through [Collector.CallInteractive] and
// the enqueue errors passed to [Collector.ObserveEnqueueError]:
//
//	batchq_claimed_jobs_total{queue,tenant}
//	batchq_claimed_tokens_total{queue,tenant}                     estimated
//	batchq_job_wait_seconds{queue,tenant}                         histogram, enqueue to claim
//	batchq_finished_jobs_total{queue,tenant,outcome}
//	batchq_finished_estimated_tokens_total{queue,tenant,outcome}
//	batchq_finished_actual_tokens_total{queue,tenant,outcome}     where the handler reported it
//	batchq_job_duration_seconds{queue,outcome}                    histogram, handler run time
//	batchq_expired_jobs_total{queue,tenant}                       by a claim or maintenance
//	batchq_expired_tokens_total{queue,tenant}
//	batchq_queue_full_rejected_jobs_total{queue,tenant}           from ObserveEnqueueError
//	batchq_batch_throttle_waits_total{queue,key}
//	batchq_batch_throttle_wait_seconds_total{queue,key}
//	batchq_interactive_wait_seconds{key}                          histogram, admission wait
//	batchq_interactive_tokens_total{key}                          estimated
//	batchq_rate_limited_responses_total{key,priority}             429s received
//	batchq_quota_paused_seconds_total{key}
//	batchq_quota_long_pauses_total{key}                           429s that paused the fleet for over a minute
//	batchq_worker_errors_total{queue}
//
// outcome is that of queue.EventFinished: succeeded, failed, discarded and
// cancelled end a job (failed also counts a job whose lease ran out with no
// attempts left, as the pool whose maintenance found it reports; discarded,
// one given up on a Permanent error; cancelled, one an operator cancelled
// after it was claimed); retrying, released (handed back: after a 429, or
// unstarted because its deadline passed while it was claimed ahead, the
// quota had no room for it, or the pool shut down) and lease_lost end an
// attempt; unrecorded is an outcome the pool could not write, whose job runs
// again once its lease expires. key is the quota key (empty for a pool
// without a throttle); priority is batch or interactive. Wait seconds and
// paused seconds count the union of the waits announced, so ten workers
// told of the same pause add it once.
//
// # From the database
//
// Gauges read at each scrape (with Config.Client), the same from every
// process of a fleet, so aggregate them across instances with max, not sum:
//
//	batchq_queued_jobs{queue,tenant}
//	batchq_queued_tokens{queue,tenant}
//	batchq_oldest_queued_job_age_seconds{queue,tenant}            while jobs are queued
//	batchq_running_jobs{queue,tenant}
//	batchq_retrying_jobs{queue,tenant}
//	batchq_scheduled_jobs{queue,tenant}
//	batchq_backlog_tenants{queue}                                 tenants with unfinished jobs, as ranked
//	batchq_queue_paused{queue}                                    1 while the queue is paused
//	batchq_quota_limit{key,unit}                                  as the provider last reported
//	batchq_quota_remaining{key,unit}
//	batchq_quota_pause_remaining_seconds{key}                     0 unless paused after a 429
//	batchq_quota_headroom{key,unit,priority}                      for Config.Throttles
//	batchq_database_up                                            0 when the last reads failed
//
// unit is requests or tokens. batchq_quota_headroom is what calls of that
// priority could start now: for batch, what is left above the reserve kept
// for interactive calls, so 0 means batch work is held back. It is absent
// while nothing is known of the unit.
//
// # Bounded tenant labels
//
// A million tenants must not make a million series. Per queue, only the
// Config.TopTenants tenants with the most queued tokens get a tenant label of
// their own; the rest are summed under tenant="other". Which tenants lead is
// decided by a ranking that aggregates every unfinished job by tenant (with
// a million tenants that takes seconds), so it runs in the background at
// most once a Config.RankInterval; each scrape reads only the named tenants'
// and the rest's totals, in one pass hashed into those few groups.
//
// The event-fed series follow the same names: a tenant's events are counted
// under its own name from the ranking that made it a leader, and under
// "other" before that, except that while a queue has fewer than TopTenants
// names (with a Client, in the queues it covers) a tenant's first event names
// it at once: a queue that has had at most TopTenants tenants names every
// one of them from its first job, whenever the ranking runs. A tenant that drops out of the top keeps its name
// (its gauges going to zero, its counters still counting its last jobs)
// until TopTenants more recent leavers push it out, when its series are
// deleted: at most 2 × TopTenants named tenants per queue, whatever the
// number of tenants. Use sum(rate(...)) across tenants, which is right
// through such changes, rather than sum of the raw counters.
package metrics
