package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// HTTPConfig configures HTTPHandler.
type HTTPConfig struct {
	// Target is the URL each job's payload is POSTed to. Required.
	Target string
	// Header is added to every request, e.g. the provider's key. Its values
	// are secrets: they are never logged, and wherever a provider echoes one
	// back, in a response body or in what a failed call's error quotes, it is
	// replaced by [redacted] before the result or error is stored. The match
	// ignores letter case and JSON escapes (\/, \u002d), and a value in the
	// form "Bearer <key>" also matches its key alone. Values shorter than 8
	// bytes are not matched: too short to be a key, they would redact
	// ordinary words. A header the handler or its HTTP client sets itself
	// is refused (ReservedHeader).
	Header http.Header
	// Client sends the requests. nil: a client with a 2-minute timeout.
	// Redirects are not followed unless its CheckRedirect is set: following
	// a 301, 302 or 303 would send the headers again, as a GET, to wherever
	// the answer points.
	Client *http.Client
	// MaxErrorBody is how much of a failed response's body is kept in the
	// outcome's error. 0: 512 bytes.
	MaxErrorBody int
}

// HTTPHandler returns a Handler that POSTs each job's payload to cfg.Target
// and reads the outcome from the response:
//
//   - 2xx: succeeded; the body is the result, and the actual cost is read
//     from its usage (total_tokens, or input_tokens + output_tokens). Of a
//     body over 16 MiB the head is the result (stored as a summary, as any
//     result over Config.MaxResultBytes is), and the usage is read from
//     the rest as it streams by, up to a GiB (past that, or when the rest
//     breaks off, the cost is unknown and the estimate stands);
//   - 429: handed back without using an attempt, the fleet paused per
//     Retry-After;
//   - 408, 409, 5xx and network errors: retried with backoff while attempts
//     and the deadline allow;
//   - any other status (a 4xx, or a redirect the client did not follow):
//     discarded (Permanent), with the status and the start of the body.
//
// Each request carries Content-Type: application/json, Idempotency-Key:
// batchq-<job id>, Batchq-Job-Id, Batchq-Tenant and Batchq-Attempt, and
// cfg.Header. Every response's headers reach the pool's throttle.
//
// Each attempt sends its request once. net/http's Transport would re-send a
// request with an Idempotency-Key, on a new connection, when a reused
// connection closes before the answer; the request's body is built so that
// it never does (its GetBody is nil), and so http.Client does not follow a
// 307 or 308 redirect either, which would re-send the payload; nor, unless
// cfg.Client's CheckRedirect says to, a 301, 302 or 303, which would send
// the headers again as a GET. A connection that fails before the answer is a
// network error: the attempt is used, and the job is retried by the queue's
// backoff with the next Batchq-Attempt.
func HTTPHandler(cfg HTTPConfig) (Handler, error) {
	if cfg.Target == "" {
		return nil, errors.New("batchq: HTTPHandler: Target is required")
	}
	target, err := url.Parse(cfg.Target)
	if err != nil || target.Host == "" || (target.Scheme != "http" && target.Scheme != "https") {
		return nil, fmt.Errorf("batchq: HTTPHandler: Target %q: must be an http or https URL", redactURL(cfg.Target))
	}
	for k := range cfg.Header {
		if why := ReservedHeader(k); why != "" {
			return nil, fmt.Errorf("batchq: HTTPHandler: Header %q: %s", k, why)
		}
	}
	shown := redactURL(cfg.Target)
	client := &http.Client{Timeout: 2 * time.Minute}
	if cfg.Client != nil {
		c := *cfg.Client
		client = &c
	}
	if client.CheckRedirect == nil {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	maxBody := cfg.MaxErrorBody
	if maxBody <= 0 {
		maxBody = 512
	}
	// A provider that echoes the request (an error quoting the key it was
	// given, say) must not get a secret into outcomes.
	red := newRedactor(cfg.Header)
	return func(ctx context.Context, j *Job) (Result, error) {
		// A job from the queue always has a payload; one built by hand may
		// not, and an empty body would make the request replayable.
		payload := j.Payload
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		// Not a *bytes.Reader: NewRequest would set GetBody, and with it
		// and the Idempotency-Key the Transport re-sends the request when
		// a reused connection closes before the answer.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Target, io.NopCloser(bytes.NewReader(payload)))
		if err != nil {
			return Result{}, Permanent(fmt.Errorf("batchq: request for job %d: %w", j.ID, err))
		}
		req.ContentLength = int64(len(payload))
		for k, vs := range cfg.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		id := strconv.FormatInt(j.ID, 10)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "batchq-"+id)
		req.Header.Set("Batchq-Job-Id", id)
		req.Header.Set("Batchq-Tenant", j.Tenant)
		req.Header.Set("Batchq-Attempt", strconv.Itoa(j.Attempt))

		resp, err := client.Do(req)
		if err != nil {
			// net/http's error repeats the URL, user and query included: an
			// API key in either would be stored in the outcome's error.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the connection closed before an answer: %w", err)
			}
			// And it may quote what the provider sent (a malformed status
			// line, say), which may echo the key.
			return Result{}, red.redactError(fmt.Errorf("batchq: POST %s: %w", shown, err))
		}
		defer resp.Body.Close()
		limit := int64(maxOutputBody)
		if resp.StatusCode < 200 || resp.StatusCode >= 300 {
			// An error keeps the head of its body: read that, and enough
			// past it for a secret that spans the cut to be found and
			// redacted. A proxy's error page of megabytes, read whole by
			// every handler at once, could take a worker's memory.
			limit = int64(maxBody) + errorBodySlack
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		res := Result{Response: resp}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			if err != nil {
				return res, red.redactError(fmt.Errorf("batchq: reading the response to job %d: %w", j.ID, err))
			}
			if int64(len(raw)) > limit {
				// Larger than a result is held: the head is the result
				// (stored as a summary), and the usage, which providers
				// write last, is read from the rest as it goes by, up to
				// maxUsageScan. The call succeeded whatever that read
				// meets: a rest that breaks off leaves the cost unknown.
				res.ActualCost = streamUsage(io.MultiReader(bytes.NewReader(raw), io.LimitReader(resp.Body, maxUsageScan)))
				raw = raw[:limit]
			} else {
				res.ActualCost = usageTokens(raw)
			}
			body, found := red.redact(raw)
			res.Output = body
			if found && json.Valid(raw) && !json.Valid(body) {
				// A key matched outside a JSON string (a key of digits
				// that a number spelt, say): the result is kept, as a
				// string.
				res.Output, _ = json.Marshal(string(body))
			}
			return res, nil
		}
		// What an error quotes: the reason phrase is the provider's text
		// too, and the body's head is cut after the redaction, which a cut
		// key would escape.
		status := red.text(resp.Status)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			return res, fmt.Errorf("%w: %s", ErrRateLimited, status)
		case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusConflict, resp.StatusCode >= 500:
			return res, fmt.Errorf("batchq: provider answered %s: %s", status, head(red.text(string(raw)), maxBody))
		default:
			return res, Permanent(fmt.Errorf("batchq: provider answered %s: %s", status, head(red.text(string(raw)), maxBody)))
		}
	}, nil
}

// maxOutputBody is how much of a successful response's body is held: a
// result is stored whole only up to Config.MaxResultBytes (at most 1 MiB),
// and as a summary of its head past that.
const maxOutputBody = 16 << 20

// errorBodySlack is how much of a failed response's body is read past the
// part kept (HTTPConfig.MaxErrorBody): more than any header secret is long.
const errorBodySlack = 64 << 10

// usageTokens reads the tokens a provider says a call used, as they count
// against its token limit: usage.total_tokens (OpenAI and most others) when
// above 0 (a proxy may send 0 beside the parts); else
// usage.prompt_tokens + usage.completion_tokens (OpenAI's chat shape without
// a total); else usage.input_tokens + usage.cache_creation_input_tokens +
// usage.output_tokens (Anthropic, whose input_tokens leaves out the prompt
// written to its cache, which counts against the input-token limit, and
// whose cache reads do not count against it on most models). 0: the
// response did not say, or said 0.
func usageTokens(body []byte) int64 {
	var r struct {
		Usage *struct {
			TotalTokens         *int64 `json:"total_tokens"`
			PromptTokens        *int64 `json:"prompt_tokens"`
			CompletionTokens    *int64 `json:"completion_tokens"`
			InputTokens         int64  `json:"input_tokens"`
			CacheCreationTokens int64  `json:"cache_creation_input_tokens"`
			OutputTokens        int64  `json:"output_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return 0
	}
	u := r.Usage
	switch {
	case u.TotalTokens != nil && *u.TotalTokens > 0:
		return *u.TotalTokens
	case u.PromptTokens != nil || u.CompletionTokens != nil:
		var n int64
		for _, p := range []*int64{u.PromptTokens, u.CompletionTokens} {
			if p != nil && *p > 0 {
				n = addCapped(n, *p)
			}
		}
		return n
	}
	var n int64
	for _, v := range []int64{u.InputTokens, u.CacheCreationTokens, u.OutputTokens} {
		if v > 0 {
			n = addCapped(n, v)
		}
	}
	return n
}

// addCapped is a + b for non-negative a and b, at most math.MaxInt64.
func addCapped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// maxUsageScan is how much of a successful response's body past what is
// held (maxOutputBody) is read for its usage.
const maxUsageScan = 1 << 30

// streamUsage reads the tokens a provider says a call used, as usageTokens
// does, from a body too large to hold: it walks the JSON as it streams by,
// holding only the value of the top-level "usage" member (the last, as
// encoding/json keeps it, its name matched without regard to case). 0: the
// body is not one whole JSON object (an event stream, say, or one cut off
// by a read error), or does not say.
func streamUsage(r io.Reader) int64 {
	const maxUsage = 64 << 10 // a usage object is a few numbers
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		depth    int
		started  bool // the top-level object has begun
		inString bool
		escaped  bool
		key      []byte // the string just read at depth 1, up to len("usage")+1 bytes
		afterKey bool   // "usage": was just read at depth 1
		usage    []byte // the usage value being read; nil when none is
		found    int64
	)
	for {
		c, err := br.ReadByte()
		if err != nil {
			// io.EOF before the object closed, or a read that failed.
			return 0
		}
		if usage != nil && len(usage) < maxUsage {
			usage = append(usage, c)
		}
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			if inString && depth == 1 && usage == nil && len(key) <= len("usage") {
				key = append(key, c)
			}
			continue
		case jsonSpace(c):
			continue
		case !started:
			if c != '{' {
				return 0
			}
			started = true
		case c == '"':
			inString, key = true, key[:0]
			continue
		case c == ':' && depth == 1 && usage == nil:
			afterKey = strings.EqualFold(string(key), "usage")
			continue
		}
		if afterKey {
			// A later usage replaces an earlier one, null or not.
			found, afterKey = 0, false
			if c == '{' {
				usage = []byte{c}
			}
		}
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if usage != nil && depth == 1 {
				// Over maxUsage it was no usage object: it stays unread.
				found = usageTokens(append(append([]byte(`{"usage":`), usage...), '}'))
				usage = nil
			}
			if depth == 0 {
				// The object closed: what follows may only be spaces.
				for {
					c, err := br.ReadByte()
					if err == io.EOF {
						return found
					}
					if err != nil || !jsonSpace(c) {
						return 0
					}
				}
			}
		}
	}
}

// jsonSpace reports whether c is JSON's whitespace.
func jsonSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func head(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// redactURL drops what may hold a credential from a URL before it is logged
// or stored: its user information and its query (Gemini's ?key=, say).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Unparsable: keep the scheme at most.
		if i := strings.Index(s, "://"); i >= 0 {
			return s[:i+3] + "…"
		}
		return "…"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "redacted", false
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// redacted replaces a secret wherever it is found.
const redacted = "[redacted]"

// A redactor finds the values of request headers in what a provider sends
// back, whatever their letter case: ASCII's, plus the four other letters that
// case mapping or Unicode's simple folding equate with ASCII ones (Turkish
// İ and ı, the long s and the Kelvin sign), for a provider that upper-cases
// "i" the Turkish way; a value with other letters outside ASCII is compared
// by Unicode's simple folding, as strings.EqualFold does. Each value is
// searched for twice, in one linear pass each: in the bytes as sent, and in
// the text they stand for once JSON's escapes (\/, \u002d, \ud83d\ude00) are
// decoded, as PostgreSQL does when it stores a result as jsonb. A redactor
// is safe for concurrent use.
type redactor struct {
	secrets []*secret
	unicode bool // some secret has letters outside ASCII
}

// A secret is a value to redact, as folded symbols, with the failure
// function of a Knuth-Morris-Pratt search: it never looks at a byte twice,
// however the body repeats the key's prefix.
type secret struct {
	sym  []rune
	fail []int
	// The bytes a symbol equal to the first, or the second, may begin with.
	first, second [256]bool
}

// mayBegin returns the bytes that may begin a symbol that folds to sym.
func mayBegin(sym rune) [256]bool {
	var t [256]bool
	for c := range utf8.RuneSelf {
		t[c] = rune(asciiLower(byte(c))) == sym
	}
	t['\\'] = true // an escape may stand for anything
	switch {
	case sym >= utf8.RuneSelf, sym < 0:
		for c := utf8.RuneSelf; c < 256; c++ {
			t[c] = true
		}
	case sym == 'i':
		t[0xc4] = true // İ, ı
	case sym == 's':
		t[0xc5] = true // ſ
	case sym == 'k':
		t[0xe2] = true // the Kelvin sign
	}
	return t
}

// A span is the bytes [start, end) of a match.
type span struct{ start, end int }

func newRedactor(h http.Header) *redactor {
	var values []string
	for _, vs := range h {
		for _, v := range vs {
			// What goes on the wire: net/http trims the value.
			v = strings.TrimSpace(v)
			values = append(values, v)
			if _, tok, ok := strings.Cut(v, " "); ok {
				values = append(values, strings.TrimSpace(tok)) // the key without "Bearer "
			}
		}
	}
	r := &redactor{}
	var keep []string
	for _, v := range values {
		if len(v) < 8 {
			continue
		}
		for _, c := range v {
			if c >= utf8.RuneSelf && foldSpecial(c) == c {
				r.unicode = true
			}
		}
		keep = append(keep, v)
	}
	all := make([]*secret, len(keep))
	for i, v := range keep {
		all[i] = r.newSecret(v)
	}
	// A value that holds another ("Bearer sk-…" and "sk-…") needs no
	// search of its own: every match of it holds a match of the other.
	// Of equal ones, the first is searched for.
	for i, s := range all {
		covered := false
		for k, o := range all {
			if k != i && containsSyms(s.sym, o.sym) && (len(o.sym) < len(s.sym) || k < i) {
				covered = true
				break
			}
		}
		if !covered {
			r.secrets = append(r.secrets, s)
		}
	}
	return r
}

// containsSyms reports whether sub occurs in s.
func containsSyms(s, sub []rune) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if slices.Equal(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

func (r *redactor) newSecret(v string) *secret {
	s := &secret{}
	for i := 0; i < len(v); {
		c, size := utf8.DecodeRuneInString(v[i:])
		if c == utf8.RuneError && size == 1 {
			c = invalidByte(v[i])
		} else {
			c = r.fold(c)
		}
		s.sym = append(s.sym, c)
		i += size
	}
	s.fail = make([]int, len(s.sym))
	for i, k := 1, 0; i < len(s.sym); i++ {
		for k > 0 && s.sym[i] != s.sym[k] {
			k = s.fail[k-1]
		}
		if s.sym[i] == s.sym[k] {
			k++
		}
		s.fail[i] = k
	}
	// A secret is at least 8 bytes, so at least 2 runes.
	s.first, s.second = mayBegin(s.sym[0]), mayBegin(s.sym[1])
	return s
}

// redact returns b with every secret replaced, and whether it replaced any;
// unchanged, b itself. A match never splits a JSON escape, so a secret inside
// a JSON string leaves the string valid.
func (r *redactor) redact(b []byte) ([]byte, bool) {
	var spans []span
	escapes := bytes.IndexByte(b, '\\') >= 0
	for _, s := range r.secrets {
		spans = r.find(b, s, false, spans)
		if escapes {
			spans = r.find(b, s, true, spans)
		}
	}
	if len(spans) == 0 {
		return b, false
	}
	slices.SortFunc(spans, func(x, y span) int { return x.start - y.start })
	out := make([]byte, 0, len(b))
	at := 0
	for i := 0; i < len(spans); {
		cur := spans[i]
		for i++; i < len(spans) && spans[i].start <= cur.end; i++ {
			cur.end = max(cur.end, spans[i].end)
		}
		out = append(out, b[at:cur.start]...)
		out = append(out, redacted...)
		at = cur.end
	}
	return append(out, b[at:]...), true
}

// text returns s as an error quoting it is stored: without NUL bytes, which
// the stored text drops (cleanText), and so joins what they split, and with
// every secret replaced.
func (r *redactor) text(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if b, changed := r.redact([]byte(s)); changed {
		return string(b)
	}
	return s
}

// redactError returns err, or, if its text holds a secret (or NUL bytes, see
// text), an error with the secret redacted. That error does not wrap err,
// whose text still holds it.
func (r *redactor) redactError(err error) error {
	if msg := r.text(err.Error()); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}

// find appends the matches of s in b to spans. Each symbol of b is a rune,
// folded; a JSON escape is one symbol (its rune) when decode is set, else
// its bytes are symbols, and a match that begins or ends inside it takes in
// the whole escape. Between matches, it skips to the next byte that may
// begin one.
func (r *redactor) find(b []byte, s *secret, decode bool, spans []span) []span {
	m := &matcher{s: s, starts: make([]int, len(s.sym)), spans: spans}
	for i := 0; i < len(b); {
		if m.k == 0 {
			for i < len(b) && !s.first[b[i]] ||
				// Most that may begin a match do not go on to the
				// second symbol: skip them too.
				i+1 < len(b) && b[i] < utf8.RuneSelf && b[i] != '\\' && !s.second[b[i+1]] {
				i++
			}
			if i == len(b) {
				break
			}
		}
		c := b[i]
		switch {
		case c == '\\':
			size, e := jsonEscape(b[i:])
			if decode {
				m.step(r.fold(e), i, i+size)
			} else {
				for _, c := range b[i : i+size] {
					m.step(rune(asciiLower(c)), i, i+size)
				}
			}
			i += size
		case c < utf8.RuneSelf:
			m.step(rune(asciiLower(c)), i, i+1)
			i++
		default:
			e, size := utf8.DecodeRune(b[i:])
			if e == utf8.RuneError && size == 1 {
				e = invalidByte(c)
			} else {
				e = r.fold(e)
			}
			m.step(e, i, i+size)
			i += size
		}
	}
	return m.spans
}

// A matcher is the state of one search for a secret.
type matcher struct {
	s      *secret
	starts []int // where the last len(s.sym) symbols start, a ring
	at     int   // the ring's oldest entry
	k      int   // how many of the last symbols match the secret's first
	spans  []span
}

// step takes the next symbol, c, of bytes [start, end).
func (m *matcher) step(c rune, start, end int) {
	m.starts[m.at] = start
	if m.at++; m.at == len(m.starts) {
		m.at = 0
	}
	sym := m.s.sym
	for m.k > 0 && sym[m.k] != c {
		m.k = m.s.fail[m.k-1]
	}
	if sym[m.k] == c {
		m.k++
	}
	if m.k == len(sym) {
		m.spans = append(m.spans, span{m.starts[m.at], end})
		m.k = m.s.fail[m.k-1]
	}
}

// fold maps the letters that are the same letter in another case to one.
func (r *redactor) fold(c rune) rune {
	if c < utf8.RuneSelf {
		return rune(asciiLower(byte(c)))
	}
	if f := foldSpecial(c); f != c || !r.unicode {
		return f
	}
	// The least rune of its orbit under unicode.SimpleFold.
	least := c
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return least
}

// foldSpecial maps the letters outside ASCII that case mapping or simple
// folding equate with ASCII ones to those, and leaves other runes alone.
func foldSpecial(c rune) rune {
	switch c {
	case 'İ', 'ı': // Turkish: "i" upper-cased, "I" lower-cased
		return 'i'
	case 'ſ': // folds to s
		return 's'
	case '\u212a': // the Kelvin sign, folds to k
		return 'k'
	}
	return c
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// invalidByte is the symbol of a byte that is not UTF-8: negative, so no rune
// matches it, and one per byte, so a secret with such bytes still matches
// them.
func invalidByte(c byte) rune { return -1 - rune(c) }

// jsonEscape returns the length of the JSON escape at the start of b, which
// begins with a backslash, and the rune it stands for; a backslash that
// begins no escape stands for itself. A surrogate pair is one escape.
func jsonEscape(b []byte) (int, rune) {
	if len(b) < 2 {
		return 1, '\\'
	}
	switch b[1] {
	case '"', '\\', '/':
		return 2, rune(b[1])
	case 'b':
		return 2, '\b'
	case 'f':
		return 2, '\f'
	case 'n':
		return 2, '\n'
	case 'r':
		return 2, '\r'
	case 't':
		return 2, '\t'
	case 'u':
		c, ok := parseHex4(b[2:])
		if !ok {
			return 1, '\\'
		}
		if utf16.IsSurrogate(c) && len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if lo, ok := parseHex4(b[8:]); ok {
				if p := utf16.DecodeRune(c, lo); p != utf8.RuneError {
					return 12, p
				}
			}
		}
		return 6, c
	}
	return 1, '\\'
}

// parseHex4 reads the four hexadecimal digits at the start of b. (hex4
// trusts that they are: it reads JSON that json.Valid accepted.)
func parseHex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var c rune
	for _, d := range b[:4] {
		switch {
		case '0' <= d && d <= '9':
			d -= '0'
		case 'a' <= d && d <= 'f':
			d -= 'a' - 10
		case 'A' <= d && d <= 'F':
			d -= 'A' - 10
		default:
			return 0, false
		}
		c = c<<4 | rune(d)
	}
	return c, true
}

// ReservedHeader says why HTTPHandler cannot send the header name as
// HTTPConfig.Header gives it, or "" when it can: the handler sets some
// headers itself on each request, over any of the same name, and its HTTP
// client sets or drops others, or manages the connection they are about.
func ReservedHeader(name string) string {
	k := http.CanonicalHeaderKey(name)
	switch k {
	case "Content-Type", "Idempotency-Key":
		return "the worker sets " + k + " itself"
	case "Host":
		return "the worker sets Host itself, from its target"
	case "Content-Length", "Transfer-Encoding":
		return "the worker's HTTP client sets " + k + " itself, from the payload"
	case "Trailer":
		return "the worker sends no trailers"
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Upgrade":
		return "a hop-by-hop header: the worker's HTTP client manages its connections"
	}
	if strings.HasPrefix(k, "Batchq-") {
		return "the worker sets the Batchq- headers itself"
	}
	return ""
}
