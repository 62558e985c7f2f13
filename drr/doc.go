// Package drr is an in-memory fair queue that shares capacity between tenants
// by cost, using deficit round robin (Shreedhar and Varghese, 1995).
//
// It is batchq's reference model: the Postgres dequeuer is tested against the
// order this package produces, so the order is specified exactly below and
// nothing here is approximate.
//
// # Model
//
// Every tenant with queued jobs has a FIFO of its own and a place in a ring;
// tenants join the ring at its end, in the order they become active, and a
// pointer moves round it. Each visit tops the visited tenant's deficit up
// once by its grant, Quantum × weight rounded to an integer (at least 1).
// The tenant then dequeues jobs, one per DequeueAt call, while its deficit
// covers the cost of the job at its head; when it does not, the pointer moves
// on and the tenant keeps the deficit it has, so a job larger than one grant
// runs after enough visits. A tenant whose queue empties leaves the ring and
// its deficit is reset, so an idle tenant cannot bank credit and then burst.
// A tenant that joins while the pointer is past the last tenant of the ring
// is visited next, before the pointer wraps: it joins the current round.
//
// A tenant that left the ring and comes back before the pointer wraps has had
// its visit in the current round: it takes its place at the end of the ring
// and is first visited in the next round. The article's FairQueue visits it
// again at once, so a tenant that refills its queue whenever it empties (a
// chain of jobs, each enqueueing the next) would be visited every time and
// the tenants before it in the ring never.
//
// Because the grant is per visit and not per job, a tenant with ten thousand
// queued jobs gets the same share of each round as a tenant with one, and a
// tenant whose jobs are ten times larger gets a tenth of the jobs and the same
// tokens.
//
// When a whole pass over the ring would dequeue nothing because every head
// costs more than its tenant's deficit, the queue adds the grants of all the
// passes that would be futile in one step, so a job that costs far more than
// one grant does not cost one visit per grant. The order is exactly that of
// plain looping.
//
// # Deadlines
//
// Every queued job has a deadline; a job enqueued without one gets
// Config.DefaultTTL after the time it was enqueued. A job whose deadline is
// at or before the time of a dequeue is expired: when the pointer reaches it
// at the head of its tenant's queue it is dropped, reported to the onExpired
// callback, and never returned. Expired jobs deeper in a queue stay there,
// and count towards the tenant's bound, until they reach the head.
//
// # Time and concurrency
//
// Every method that depends on the time takes it as an argument (EnqueueAt,
// DequeueAt); Enqueue and Dequeue pass time.Now(). A Queue is safe for
// concurrent use by multiple goroutines: one mutex guards all of its state.
package drr
