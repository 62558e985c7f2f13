// Package provider is a simulated LLM provider for tests, the demo and
// benchmarks: an http.Handler, to serve with httptest.NewServer or an
// http.Server on loopback, that rate-limits like a real chat completions API
// and records what it saw, so a test can assert how a client behaved.
//
// # The quota
//
// A Provider has two limits, requests and tokens per Window, refilled either
// in fixed windows (FixedWindow, the default: the whole limit comes back at
// each boundary) or as a continuous token bucket (TokenBucket, OpenAI's model:
// the whole limit refills linearly over Window). A request costs one request and its
// tokens, and is admitted only if both units have room; the quota is charged
// when the request arrives, as real providers do, and then the request waits
// out the latency.
//
// # Requests
//
// A request is a POST with a JSON body. Its token cost is the body's "tokens"
// field, else its "estimated_tokens", else Config.DefaultTokens; the job id is
// the Batchq-Job-Id header (Config.Header), and the tenant the Batchq-Tenant
// header. What a request is charged is its cost times the tenant's
// Config.UsageFactor, so that a test can simulate a tenant whose estimates are
// too low; the quota must have room for what is charged.
//
// # Responses
//
// Every response carries OpenAI's headers for both units as they stand after
// the request's arrival: x-ratelimit-limit-requests,
// x-ratelimit-remaining-requests and x-ratelimit-reset-requests, and the same
// for tokens, the reset a Go duration ("1s", "6m0s", "59.5s") rounded up to
// the millisecond. A request that does not fit is answered 429 at once, with
// Retry-After (whole seconds, rounded up), retry-after-ms and an error body
// of type "rate_limit_exceeded"; a request that could never fit (more tokens
// than the limit) gets the 429 without a Retry-After. An admitted request is
// answered 200 with a completion:
//
//	{"id":"chatcmpl-sim-1","object":"chat.completion",
//	 "usage":{"prompt_tokens":75,"completion_tokens":25,"total_tokens":100},
//	 "echo":"<the job id>"}
//
// or, by Config.FailRate and Config.FailJobs, with an injected fault. Faults
// are charged like any admitted request. Malformed requests are answered 400
// (405 for a method other than POST) and charged nothing.
//
// # Observing
//
// Stats counts requests by outcome and the tokens charged; Log and JobLog list
// each request with its job id, Idempotency-Key, arrival and finish times and
// status. MaxConcurrentPerJob is the most requests of one job in flight at
// once, RequestsDuringPause the requests that arrived before an announced
// Retry-After had passed, and Utilization compares the tokens admitted over a
// period with what the limits allowed.
//
// # Time and randomness
//
// Config.Now is the clock and Config.Sleep waits out the latency, so unit
// tests run on fixed instants without sleeping. Jitter and FailRate draw from
// a source seeded by Config.Seed: requests arriving in the same order get the
// same delays and faults.
package provider
