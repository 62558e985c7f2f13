package provider

import (
	"slices"
	"time"
)

// Stats counts what a Provider has seen. Each request is counted when it
// arrives, by the status it will be answered with, so
// Requests = OK + TooManyRequests + ClientErrors + ServerErrors.
type Stats struct {
	Requests int64 // every request
	Admitted int64 // fit the quota and were charged, whatever their status

	OK              int64 // answered 200
	TooManyRequests int64 // answered 429
	ClientErrors    int64 // answered another 4xx: malformed, or a FailJobs fault
	ServerErrors    int64 // answered 5xx: a FailRate or FailJobs fault

	TokensCharged int64 // the tokens charged to admitted requests
}

// Request is one entry of the log.
type Request struct {
	JobID          string // the Config.Header request header; "" when absent
	IdempotencyKey string // the Idempotency-Key request header
	Tenant         string // the Batchq-Tenant request header
	Admitted       bool   // it fit the quota and was charged
	Tokens         int64  // what it was charged; 0 unless admitted
	Status         int    // the status it is answered with

	Arrived  time.Time // when it arrived, and was charged if admitted
	Finished time.Time // when its answer went out; zero while in flight
}

// Utilization compares what a Provider admitted over [From, To] with the most
// its limits allow over that time.
type Utilization struct {
	From, To time.Time

	// Requests and Tokens are what was admitted (charged) by requests that
	// arrived in [From, To].
	Requests, Tokens int64
	// RequestsAllowed and TokensAllowed are the most the limits let through
	// over [From, To] when the whole limit is available at From: for a
	// TokenBucket the limit plus its refill, limit × (To − From) / Window;
	// for a FixedWindow the limit times the windows [From, To] touches.
	RequestsAllowed, TokensAllowed int64
}

// RequestShare is Requests / RequestsAllowed, or 0 if nothing was allowed.
func (u Utilization) RequestShare() float64 { return share(u.Requests, u.RequestsAllowed) }

// TokenShare is Tokens / TokensAllowed, or 0 if nothing was allowed.
func (u Utilization) TokenShare() float64 { return share(u.Tokens, u.TokensAllowed) }

func share(n, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// Stats returns the counts so far.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Log returns every request so far, in order of arrival.
func (p *Provider) Log() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// JobLog returns the requests that carried job id job, in order of arrival;
// nil if there were none.
func (p *Provider) JobLog(job string) []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Request
	for _, i := range p.jobs[job] {
		out = append(out, p.log[i])
	}
	return out
}

// MaxConcurrentPerJob returns the most requests of one job id that were ever
// in the handler at once (from arrival until the answer was written, 429s
// included). Requests without a job id are not counted. Above 1, the same job
// ran twice at once.
func (p *Provider) MaxConcurrentPerJob() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxPerJob
}

// RequestsDuringPause returns how many requests arrived while a client
// should have been paused: before an earlier 429's arrival time plus the wait
// it announced in retry-after-ms (which is never longer than Retry-After).
// It counts requests that were already on their way when the 429 went out,
// so a client with several calls in flight can score a few without being at
// fault.
func (p *Provider) RequestsDuringPause() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.duringPause
}

// Utilization compares what was admitted by requests arriving in [from, to]
// with what the limits allow over that time. A zero from is the arrival of
// the first admitted request, and a zero to that of the last; with nothing
// admitted, a zero bound gives the zero Utilization.
func (p *Provider) Utilization(from, to time.Time) Utilization {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from.IsZero() || to.IsZero() {
		first, last, ok := p.admittedSpan()
		if !ok {
			return Utilization{}
		}
		if from.IsZero() {
			from = first
		}
		if to.IsZero() {
			to = last
		}
	}
	u := Utilization{
		From:            from,
		To:              to,
		RequestsAllowed: p.requests.allowed(from, to),
		TokensAllowed:   p.tokens.allowed(from, to),
	}
	for _, r := range p.log {
		if r.Admitted && !r.Arrived.Before(from) && !r.Arrived.After(to) {
			u.Requests++
			u.Tokens += r.Tokens
		}
	}
	return u
}

// admittedSpan returns the earliest and latest arrival of an admitted request.
func (p *Provider) admittedSpan() (first, last time.Time, ok bool) {
	for _, r := range p.log {
		if !r.Admitted {
			continue
		}
		if !ok || r.Arrived.Before(first) {
			first = r.Arrived
		}
		if !ok || r.Arrived.After(last) {
			last = r.Arrived
		}
		ok = true
	}
	return first, last, ok
}
