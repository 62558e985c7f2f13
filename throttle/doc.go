// Package throttle paces calls to an LLM provider from what the provider says
// is left of the quota, keeps a reserve of it for interactive calls, and stops
// everything after a 429.
//
// A Throttle answers one question per call: can a call of this cost start
// now, and if not, how long until asking again is worthwhile
// ([Throttle.CanStart])? [Throttle.Admit] and [Throttle.Wait] wait until it
// can; [Throttle.ObserveResponse] tells it what the provider answered.
//
// Every method takes a context first and returns the [Store]'s error. The
// current time comes from one clock, [Config].Now (time.Now unless set);
// what is known about a call (when it was sent, when its response arrived)
// is passed as arguments, read from the same clock. Tests set a clock they
// advance by hand, so they run on fixed instants and never sleep.
//
// # The model
//
// A call costs one request and its token estimate, and starts only when both
// units admit it. For each unit the throttle keeps what the provider last
// said (limit, remaining, reset) and subtracts what it lets through until a
// newer response corrects it. Nothing known means go.
//
// Batch calls start only while remaining − cost ≥ ceil(limit × Reserve);
// interactive calls may use the reserve. A cost that can never fit (more than
// the limit less the reserve, for batch) is answered with Never, not a wait.
//
// A 429 stops every start, interactive included, for its Retry-After, or for
// a default pause that doubles on repeated 429s (up to a cap) and starts over
// after a success.
//
// # Out-of-order responses
//
// Responses of parallel calls arrive out of order, and the remaining a
// response reports counts the calls sent before it, not those sent after. The
// throttle keeps the observation from the latest-sent call and subtracts the
// calls admitted after that one was sent; it keeps a short, bounded log of
// admissions for that. A stale response cannot undo a fresher one. Pass the
// instant a call was admitted ([Throttle.Admit]) as its sentAt.
//
// # Refill
//
// With [Window] the quota stays as reported until the reset, then the whole
// limit is back and local accounting is forgotten. With [TokenBucket] it
// refills linearly from the response until the reset (when it is full), so
// calls start as soon as the refill covers them. When a unit is short and
// nothing says when it will refill, the throttle waits a probe interval, then
// lets one call through to learn more.
//
// # Sharing one state
//
// Every decision is a pure function of a small [State], the time and the
// call. A [Store] loads and saves the State of a quota key atomically, so a
// fleet of processes can pace from one shared state: [MemoryStore] in one
// process, a Postgres row per key in package queue. Package throttletest
// holds the behaviour tests every Store must pass.
package throttle
