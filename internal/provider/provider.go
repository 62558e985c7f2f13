package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

const (
	// DefaultJobHeader is the request header that carries the job id unless
	// Config.Header names another.
	DefaultJobHeader = "Batchq-Job-Id"
	// TenantHeader is the request header whose value selects a
	// Config.UsageFactor.
	TenantHeader = "Batchq-Tenant"
	// IdempotencyKeyHeader is recorded in each Request of the log.
	IdempotencyKeyHeader = "Idempotency-Key"
)

// maxBody bounds what the provider reads of a request body.
const maxBody = 16 << 20

// Config configures a Provider. The zero Config is valid: 500 requests and
// 200,000 tokens a minute in fixed windows, answered at once, with no faults.
type Config struct {
	// RequestsPerWindow is the request limit: the most requests the quota
	// holds at once, refilled over Window. Default 500.
	RequestsPerWindow int64
	// TokensPerWindow is the token limit, refilled over Window. Default
	// 200,000.
	TokensPerWindow int64
	// Window is the time over which both limits refill. Default 1 minute.
	Window time.Duration
	// Refill is how both limits refill. Default FixedWindow; OpenAI's model
	// is TokenBucket.
	Refill Refill

	// DefaultTokens is the cost of a request whose body has neither "tokens"
	// nor "estimated_tokens". Default 100.
	DefaultTokens int64
	// UsageFactor scales what a tenant's requests actually use over what
	// they say they cost, keyed by the value of the Batchq-Tenant request
	// header: with 1.5, a request of 100 tokens is charged 150 (rounded up).
	// The quota must have room for what is charged. Tenants not in the map
	// are charged what the request says. Default none.
	UsageFactor map[string]float64

	// Header is the request header that carries the job id, which the log
	// and MaxConcurrentPerJob group by and 2xx bodies echo. Default
	// "Batchq-Job-Id".
	Header string

	// Latency is how long an admitted request takes before it is answered.
	// A 429 or a malformed request is answered at once. Default 0.
	Latency time.Duration
	// Jitter adds a random delay in [0, Jitter) to Latency, drawn from the
	// source seeded by Seed. Default 0.
	Jitter time.Duration
	// Seed seeds the random source of Jitter and FailRate, so a run whose
	// requests arrive in the same order draws the same delays and faults.
	// Default 0, itself a fixed seed.
	Seed uint64

	// FailRate is the fraction of admitted requests answered with
	// FailStatus instead of a completion, drawn at random, in [0, 1].
	// Default 0.
	FailRate float64
	// FailStatus is the status of a FailRate fault, 500 to 599. Default 500.
	FailStatus int
	// FailJobs answers every admitted request of these job ids with the
	// status given, 400 to 599: 503 for a job that should be retried, 400
	// for one that can never succeed. Default none.
	FailJobs map[string]int

	// Now is the provider's clock. Default time.Now.
	Now func() time.Time
	// Sleep waits out a request's latency; it should return early when ctx
	// (the request's) is done. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration)
}

// Provider is a simulated LLM provider: an http.Handler that answers POSTs
// like a rate-limited chat completions endpoint and records what it saw.
// Build one with New; the zero value is not usable. It is safe for
// concurrent use. It keeps an entry per request for its whole life, so a
// test or a run builds its own.
type Provider struct {
	cfg Config

	mu          sync.Mutex
	requests    meter
	tokens      meter
	rng         *rand.Rand
	stats       Stats
	log         []Request
	jobs        map[string][]int // indexes into log
	inFlight    map[string]int
	maxPerJob   int
	pausedUntil time.Time
	duringPause int64
}

// New returns a Provider for cfg, or an error naming the invalid field.
func New(cfg Config) (*Provider, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	return &Provider{
		cfg:      cfg,
		requests: newMeter(cfg.Refill, cfg.RequestsPerWindow, cfg.Window),
		tokens:   newMeter(cfg.Refill, cfg.TokensPerWindow, cfg.Window),
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0)),
		jobs:     map[string][]int{},
		inFlight: map[string]int{},
	}, nil
}

func withDefaults(cfg Config) (Config, error) {
	invalid := func(field, format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("batchq: provider: invalid Config.%s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.RequestsPerWindow < 0:
		return invalid("RequestsPerWindow", "%d is negative", cfg.RequestsPerWindow)
	case cfg.TokensPerWindow < 0:
		return invalid("TokensPerWindow", "%d is negative", cfg.TokensPerWindow)
	case cfg.Window < 0:
		return invalid("Window", "%v is negative", cfg.Window)
	case cfg.Refill != FixedWindow && cfg.Refill != TokenBucket:
		return invalid("Refill", "%d is not FixedWindow or TokenBucket", int(cfg.Refill))
	case cfg.DefaultTokens < 0:
		return invalid("DefaultTokens", "%d is negative", cfg.DefaultTokens)
	case cfg.Latency < 0:
		return invalid("Latency", "%v is negative", cfg.Latency)
	case cfg.Jitter < 0:
		return invalid("Jitter", "%v is negative", cfg.Jitter)
	case !(cfg.FailRate >= 0 && cfg.FailRate <= 1):
		return invalid("FailRate", "%v is not in [0, 1]", cfg.FailRate)
	case cfg.FailStatus != 0 && (cfg.FailStatus < 500 || cfg.FailStatus > 599):
		return invalid("FailStatus", "%d is not a 5xx status", cfg.FailStatus)
	}
	for tenant, f := range cfg.UsageFactor {
		if !(f > 0) || math.IsInf(f, 0) {
			return invalid("UsageFactor", "%q: %v is not a positive number", tenant, f)
		}
	}
	for job, status := range cfg.FailJobs {
		if status < 400 || status > 599 {
			return invalid("FailJobs", "%q: %d is not a 4xx or 5xx status", job, status)
		}
	}
	if cfg.RequestsPerWindow == 0 {
		cfg.RequestsPerWindow = 500
	}
	if cfg.TokensPerWindow == 0 {
		cfg.TokensPerWindow = 200_000
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	if cfg.DefaultTokens == 0 {
		cfg.DefaultTokens = 100
	}
	if cfg.Header == "" {
		cfg.Header = DefaultJobHeader
	}
	if cfg.FailStatus == 0 {
		cfg.FailStatus = http.StatusInternalServerError
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return cfg, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ServeHTTP answers one request. The quota is charged when the request
// arrives: a request that fits both units is admitted and charged, waits out
// the latency and is answered 200 with a completion (or with an injected
// fault); one that does not fit is answered 429 at once. Every answer carries
// the quota headers as they stood after the request's arrival.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in := incoming{
		job:            r.Header.Get(p.cfg.Header),
		idempotencyKey: r.Header.Get(IdempotencyKeyHeader),
		tenant:         r.Header.Get(TenantHeader),
	}
	if r.Method != http.MethodPost {
		in.status, in.problem = http.StatusMethodNotAllowed, "only POST is supported"
	} else if cost, given, err := readCost(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		in.status, in.problem = http.StatusBadRequest, err.Error()
	} else if !given {
		in.cost = p.cfg.DefaultTokens
	} else if cost < 0 {
		in.status, in.problem = http.StatusBadRequest, fmt.Sprintf("token count %d is negative", cost)
	} else {
		in.cost = cost
	}

	a := p.arrive(in)
	defer p.leave(in.job)
	if a.delay > 0 {
		p.cfg.Sleep(r.Context(), a.delay)
	}
	p.finish(a.index)

	for name, values := range a.header {
		w.Header()[name] = values
	}
	w.Header().Set("Content-Type", "application/json")
	if a.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// incoming is what ServeHTTP read of a request before it arrives at the
// quota. A non-zero status means the request is malformed.
type incoming struct {
	job, idempotencyKey, tenant string
	cost                        int64
	status                      int
	problem                     string
}

// answer is everything decided about a request when it arrives.
type answer struct {
	index  int // in the log
	status int
	header http.Header
	body   []byte
	delay  time.Duration // the latency of an admitted request
	retry  time.Duration // for a 429, how long until the request would fit
}

// readCost reads a request's cost from its JSON body: "tokens", else
// "estimated_tokens"; given is false when the body has neither, or is empty.
func readCost(r io.Reader) (cost int64, given bool, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, false, fmt.Errorf("reading the body: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, false, nil
	}
	var body struct {
		Tokens          *int64 `json:"tokens"`
		EstimatedTokens *int64 `json:"estimated_tokens"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return 0, false, fmt.Errorf("the body is not a JSON object with integer token counts: %w", err)
	}
	switch {
	case body.Tokens != nil:
		return *body.Tokens, true, nil
	case body.EstimatedTokens != nil:
		return *body.EstimatedTokens, true, nil
	}
	return 0, false, nil
}

// arrive logs a request, charges the quota if it fits and decides the answer.
func (p *Provider) arrive(in incoming) answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	a := answer{index: len(p.log)}
	p.log = append(p.log, Request{
		JobID:          in.job,
		IdempotencyKey: in.idempotencyKey,
		Tenant:         in.tenant,
		Arrived:        now,
	})
	p.stats.Requests++
	if in.job != "" {
		p.jobs[in.job] = append(p.jobs[in.job], a.index)
		p.inFlight[in.job]++
		p.maxPerJob = max(p.maxPerJob, p.inFlight[in.job])
	}
	if now.Before(p.pausedUntil) {
		p.duringPause++
	}
	p.requests.refill(now)
	p.tokens.refill(now)

	if in.status != 0 {
		a.status, a.body = in.status, errorBody("invalid_request_error", "invalid_request_error", in.problem)
	} else {
		a = p.admit(now, in, a)
	}
	a.header = p.quotaHeader(now)
	if a.retry > 0 {
		retry := ceilTo(a.retry, time.Millisecond)
		a.header.Set("Retry-After", strconv.FormatInt(int64(ceilTo(retry, time.Second)/time.Second), 10))
		a.header.Set("Retry-After-Ms", strconv.FormatInt(int64(retry/time.Millisecond), 10))
		if until := now.Add(retry); until.After(p.pausedUntil) {
			p.pausedUntil = until
		}
	}

	p.log[a.index].Status = a.status
	switch {
	case a.status == http.StatusTooManyRequests:
		p.stats.TooManyRequests++
	case a.status >= 500:
		p.stats.ServerErrors++
	case a.status >= 400:
		p.stats.ClientErrors++
	default:
		p.stats.OK++
	}
	return a
}

// admit charges a well-formed request if it fits and decides its answer.
func (p *Provider) admit(now time.Time, in incoming, a answer) answer {
	charged := p.charge(in.cost, in.tenant)
	if charged > p.tokens.limit() {
		a.status = http.StatusTooManyRequests
		a.body = errorBody("rate_limit_exceeded", "request_too_large", fmt.Sprintf(
			"Request too large: Limit %d tokens per %v, Requested %d.", p.tokens.limit(), p.cfg.Window, charged))
		return a
	}
	waitRequests, waitTokens := p.requests.waitFor(now, 1), p.tokens.waitFor(now, charged)
	if wait := max(waitRequests, waitTokens); wait > 0 {
		unit, limit, used, requested := "requests", p.requests.limit(), p.requests.limit()-p.requests.remaining(), int64(1)
		if waitTokens >= waitRequests {
			unit, limit, used, requested = "tokens", p.tokens.limit(), p.tokens.limit()-p.tokens.remaining(), charged
		}
		a.status, a.retry = http.StatusTooManyRequests, wait
		a.body = errorBody("rate_limit_exceeded", "rate_limit_exceeded", fmt.Sprintf(
			"Rate limit reached on %s per %v: Limit %d, Used %d, Requested %d. Please try again in %v.",
			unit, p.cfg.Window, limit, used, requested, ceilTo(wait, time.Millisecond)))
		return a
	}

	p.requests.take(1)
	p.tokens.take(charged)
	p.stats.Admitted++
	p.stats.TokensCharged += charged
	p.log[a.index].Admitted = true
	p.log[a.index].Tokens = charged

	a.delay = p.cfg.Latency
	if p.cfg.Jitter > 0 {
		a.delay += time.Duration(p.rng.Int64N(int64(p.cfg.Jitter)))
	}
	if status, ok := p.cfg.FailJobs[in.job]; ok {
		a.status = status
	} else if p.cfg.FailRate > 0 && p.rng.Float64() < p.cfg.FailRate {
		a.status = p.cfg.FailStatus
	}
	switch {
	case a.status >= 500:
		a.body = errorBody("server_error", "", "The server had an error while processing your request (simulated).")
	case a.status >= 400:
		a.body = errorBody("invalid_request_error", "", "The request cannot be processed (simulated).")
	default:
		a.status = http.StatusOK
		a.body = completionBody(p.stats.Admitted, in.job, charged)
	}
	return a
}

// charge is what a request of cost tokens from tenant uses.
func (p *Provider) charge(cost int64, tenant string) int64 {
	f, ok := p.cfg.UsageFactor[tenant]
	if !ok {
		return cost
	}
	// Rounding to a millionth first drops floating-point noise, so that
	// 100 × 1.1 is charged 110, not 111.
	c := math.Ceil(math.Round(float64(cost)*f*1e6) / 1e6)
	if c >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(c)
}

// quotaHeader is the OpenAI rate-limit headers of both units at now.
func (p *Provider) quotaHeader(now time.Time) http.Header {
	h := http.Header{}
	for _, u := range []struct {
		name string
		m    meter
	}{{"requests", p.requests}, {"tokens", p.tokens}} {
		h.Set("X-Ratelimit-Limit-"+u.name, strconv.FormatInt(u.m.limit(), 10))
		h.Set("X-Ratelimit-Remaining-"+u.name, strconv.FormatInt(u.m.remaining(), 10))
		// Rounded up, so that a client waiting for the reset never wakes
		// before it.
		h.Set("X-Ratelimit-Reset-"+u.name, ceilTo(u.m.resetIn(now), time.Millisecond).String())
	}
	return h
}

// finish records when the answer to the request at index went out.
func (p *Provider) finish(index int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log[index].Finished = p.cfg.Now()
}

// leave ends a request of job.
func (p *Provider) leave(job string) {
	if job == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight[job]--
}

// ceilTo rounds d up to a multiple of unit.
func ceilTo(d, unit time.Duration) time.Duration {
	if r := d % unit; r > 0 {
		return d - r + unit
	}
	return d
}

func errorBody(typ, code, message string) []byte {
	type detail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	d := detail{Message: message, Type: typ}
	if code != "" {
		d.Code = &code
	}
	return mustJSON(struct {
		Error detail `json:"error"`
	}{d})
}

// completionBody is a chat completion that used total tokens, a quarter of
// them completion.
func completionBody(seq int64, job string, total int64) []byte {
	type usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	}
	return mustJSON(struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Usage  usage  `json:"usage"`
		Echo   string `json:"echo"`
	}{
		ID:     fmt.Sprintf("chatcmpl-sim-%d", seq),
		Object: "chat.completion",
		Usage:  usage{PromptTokens: total - total/4, CompletionTokens: total / 4, TotalTokens: total},
		Echo:   job,
	})
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic("batchq: provider: " + err.Error()) // only fixed, marshalable types reach here
	}
	return append(data, '\n')
}
