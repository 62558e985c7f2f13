package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// A provider that quotes the request's key back (in an error, say) does not
// get it into the stored result or error.
func TestHTTPHandlerRedactsHeaderSecrets(t *testing.T) {
	t.Parallel()
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte(`{"echo":"` + r.Header.Get("Authorization") + `","usage":{"input_tokens":3,"output_tokens":4}}`))
	}))
	defer srv.Close()
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Header: http.Header{"Authorization": {"Bearer sk-live-0123456789"}}})
	require.NoError(t, err)
	job := &queue.Job{ID: 7, Tenant: "t", Attempt: 1, Payload: []byte(`{}`)}

	res, err := h(context.Background(), job)
	require.NoError(t, err)
	require.NotContains(t, string(res.Output), "sk-live")
	require.Contains(t, string(res.Output), "[redacted]")
	require.Equal(t, int64(7), res.ActualCost, "input_tokens + output_tokens")

	status = http.StatusUnauthorized
	_, err = h(context.Background(), job)
	require.Error(t, err)
	require.True(t, queue.IsPermanent(err), "a 401 is not retried")
	require.NotContains(t, err.Error(), "sk-live")

	status = http.StatusTooManyRequests
	_, err = h(context.Background(), job)
	require.True(t, errors.Is(err, queue.ErrRateLimited))

	status = http.StatusServiceUnavailable
	_, err = h(context.Background(), job)
	require.Error(t, err)
	require.False(t, queue.IsPermanent(err), "a 503 is retried")
}

// A network error does not get a key in the target URL, as user or in the
// query, into the stored error; net/http's own error repeats the URL.
func TestHTTPHandlerRedactsTargetCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close() // nothing listens there now
	job := &queue.Job{ID: 7, Tenant: "t", Attempt: 1, Payload: []byte(`{}`)}
	for target, shown := range map[string]string{
		"http://sk-SECRET1@" + addr + "/v1":                        "http://redacted@" + addr + "/v1",
		"http://" + addr + "/v1beta/models/m:generate?key=SECRET2": "http://" + addr + "/v1beta/models/m:generate?redacted",
	} {
		h, err := queue.HTTPHandler(queue.HTTPConfig{Target: target})
		require.NoError(t, err)
		_, err = h(context.Background(), job)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "SECRET")
		require.Contains(t, err.Error(), "batchq: POST "+shown+": ")
		require.False(t, queue.IsPermanent(err), "a network error is retried")
	}

	_, err := queue.HTTPHandler(queue.HTTPConfig{Target: "localhost:8080/v1"})
	require.ErrorContains(t, err, "must be an http or https URL")
}

// The keys echoSecrets's requests carry; echoServer echoes them back.
const (
	echoKey      = "sk-Live/9fQxiT2mZ4-wKs"
	echoOtherKey = "AIzaSyD-kP8/ts3Fq0"
)

var echoHeader = http.Header{"Authorization": {"Bearer " + echoKey}, "X-Goog-Api-Key": {echoOtherKey}}

// echoes are the ways a provider may echo a key back.
var echoes = []struct {
	name string
	echo func(key string) string
}{
	{"exact", func(k string) string { return k }},
	{"lower", strings.ToLower},
	{"upper", strings.ToUpper},
	{"mixed", func(k string) string {
		return strings.Map(func(c rune) rune {
			if unicode.IsUpper(c) {
				return unicode.ToLower(c)
			}
			return unicode.ToUpper(c)
		}, k)
	}},
	{"bearer", func(k string) string { return "authorization: bearer " + strings.ToLower(k) }},
	// Java's toUpperCase in a Turkish locale: i becomes İ.
	{"turkish", func(k string) string { return strings.ToUpperSpecial(unicode.TurkishCase, k) }},
	// JSON escapes, as PHP and others write them: \/, and \u00xx in
	// either case of hex digit.
	{"json-escaped", func(k string) string {
		var b strings.Builder
		for i, c := range k {
			switch {
			case c == '/':
				b.WriteString(`\/`)
			case c == '-':
				b.WriteString(`\u002d`)
			case i%2 == 0:
				fmt.Fprintf(&b, `\u%04X`, unicode.ToUpper(c))
			default:
				b.WriteRune(unicode.ToLower(c))
			}
		}
		return b.String()
	}},
}

// echoServer is a provider that echoes the keys of each request back,
// altered by the echo its payload names ({"echo":"lower","status":400}), in
// an answer of that status; status 0 answers a status line that is the key
// alone, which net/http's error quotes, and "reason":true answers the status
// with the key as its reason phrase ("503 sk-…").
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	byName := map[string]func(string) string{}
	for _, e := range echoes {
		byName[e.name] = e.echo
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Echo   string
			Status int
			Reason bool
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || byName[req.Echo] == nil {
			http.Error(w, "bad request", http.StatusTeapot)
			return
		}
		echo := byName[req.Echo]
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if req.Status == 0 || req.Reason {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			if req.Status == 0 {
				buf.WriteString(echo(key) + "\r\n\r\n")
			} else {
				fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", req.Status, echo(key))
			}
			buf.Flush()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(req.Status)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"},"echo":"%s","usage":{"total_tokens":5}}`,
			echo(key), echo(r.Header.Get("X-Goog-Api-Key")))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// leaks reports whether s holds either key of echoHeader, in any letter
// case, Turkish İ and ı included, once its JSON escapes are decoded.
func leaks(s string) bool {
	s = unescapeJSON(s)
	s = strings.ToLower(strings.NewReplacer("İ", "i", "ı", "i").Replace(s))
	return strings.Contains(s, strings.ToLower(echoKey)) || strings.Contains(s, strings.ToLower(echoOtherKey))
}

// unescapeJSON decodes the escapes \\, \/, \" and \uXXXX of s, left to
// right as a JSON string's are read, and leaves the rest alone.
func unescapeJSON(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch c := s[i+1]; {
		case c == '\\' || c == '/' || c == '"':
			b.WriteByte(c)
			i++
		case c == 'u' && i+6 <= len(s):
			if n, err := strconv.ParseUint(s[i+2:i+6], 16, 16); err == nil {
				b.WriteRune(rune(n))
				i += 5
				continue
			}
			b.WriteByte('\\')
		default:
			b.WriteByte('\\')
		}
	}
	return b.String()
}

func echoPayload(echo string, status int) []byte {
	return []byte(fmt.Sprintf(`{"echo":%q,"status":%d}`, echo, status))
}

// echoInReason asks echoServer for the key as the reason phrase of status.
func echoInReason(echo string, status int) []byte {
	return []byte(fmt.Sprintf(`{"echo":%q,"status":%d,"reason":true}`, echo, status))
}

// A provider that echoes a key back altered (in another letter case, after
// "Bearer ", JSON-escaped) does not get it into a result or an error, and the
// result stays JSON.
func TestHTTPHandlerRedactsEchoedSecretsInAnyCase(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Header: echoHeader})
	require.NoError(t, err)
	for _, e := range echoes {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			job := &queue.Job{ID: 7, Tenant: "t", Attempt: 1}

			job.Payload = echoPayload(e.name, http.StatusOK)
			res, err := h(context.Background(), job)
			require.NoError(t, err)
			require.True(t, json.Valid(res.Output), "%s", res.Output)
			require.False(t, leaks(string(res.Output)), "%s", res.Output)
			var out struct {
				Error struct{ Message string }
				Echo  string
			}
			require.NoError(t, json.Unmarshal(res.Output, &out))
			require.Contains(t, out.Error.Message, "[redacted]")
			require.Contains(t, out.Echo, "[redacted]")
			require.Equal(t, int64(5), res.ActualCost)

			for _, status := range []int{http.StatusBadRequest, http.StatusServiceUnavailable} {
				job.Payload = echoPayload(e.name, status)
				_, err = h(context.Background(), job)
				require.Error(t, err)
				require.False(t, leaks(err.Error()), "%d: %v", status, err)
				require.Contains(t, err.Error(), "[redacted]")
				require.Equal(t, status < 500, queue.IsPermanent(err), "%d", status)
			}

			// The reason phrase is quoted in the error, the key in it
			// redacted; a 429 stays ErrRateLimited.
			for _, status := range []int{http.StatusTooManyRequests, http.StatusBadRequest, http.StatusServiceUnavailable} {
				job.Payload = echoInReason(e.name, status)
				_, err = h(context.Background(), job)
				require.ErrorContains(t, err, strconv.Itoa(status)+" ")
				require.ErrorContains(t, err, "[redacted]")
				require.False(t, leaks(err.Error()), "%d: %v", status, err)
				require.Equal(t, status == http.StatusTooManyRequests, errors.Is(err, queue.ErrRateLimited), "%d", status)
			}
		})
	}
	// net/http's error quotes a malformed status line.
	for _, e := range []string{"lower", "upper", "mixed", "turkish"} {
		_, err = h(context.Background(), &queue.Job{ID: 7, Tenant: "t", Attempt: 1, Payload: echoPayload(e, 0)})
		require.ErrorContains(t, err, "malformed HTTP response")
		require.False(t, leaks(err.Error()), "%s: %v", e, err)
		require.False(t, queue.IsPermanent(err))
	}
}

// A key is also redacted where a provider's result spells it with bytes that
// are not UTF-8 around it, repeats its prefix many times before it (which
// a naive search pays for quadratically), or quotes it in a number.
func TestHTTPHandlerRedactsSecretsAtTheEdges(t *testing.T) {
	t.Parallel()
	const digits = "8675309123"
	cases := []struct{ name, body, want string }{
		{"prefix repeated", `{"e":"` + strings.Repeat("sk-aaaaaaa", 100) + `SK-AAAAAAAB"}`, `{"e":"` + strings.Repeat("sk-aaaaaaa", 100) + `[redacted]"}`},
		{"next to bytes that are not UTF-8", "\xff" + "Sk-AaAaAaAb\xfe", "\xff[redacted]\xfe"},
		// Replaced, {"org":[redacted]} would not be JSON.
		{"in a number", `{"org":` + digits + `,"n":1}`, `"{\"org\":[redacted],\"n\":1}"`},
		{"short values are not secrets", `{"abc":"ABC"}`, `{"abc":"ABC"}`},
		{"after an escaped surrogate pair", `{"e":"\ud83d\ude00sk-aaaaaa\u0061\u0062"}`, `{"e":"\ud83d\ude00[redacted]"}`},
		{"first letter escaped", `{"e":"\u0073k-aaaaaaab"}`, `{"e":"[redacted]"}`},
		// The bytes as sent hold the key from inside an escape: the whole
		// escape goes, so the string stays JSON.
		{"inside an escape", `{"e":"\u0041bcdefgh"}`, `{"e":"[redacted]"}`},
		// Two values that fold to the same key: one of them is searched for.
		{"values equal but for case", `{"e":"SK-ISTANBUL-KEY"}`, `{"e":"[redacted]"}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.Header.Get("Batchq-Job-Id"))
		w.Write([]byte(cases[i].body))
	}))
	t.Cleanup(srv.Close)
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Header: http.Header{
		"Authorization": {"Bearer sk-aaaaaaab"}, "X-Org": {digits}, "X-Short": {"abc"}, "X-Odd": {"u0041bcdefgh"},
		"X-Turkish": {"sk-İstanbul-key"}, "X-Ascii": {"sk-istanbul-key"},
	}})
	require.NoError(t, err)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h(context.Background(), &queue.Job{ID: int64(i), Tenant: "t", Attempt: 1, Payload: []byte(`{}`)})
			require.NoError(t, err)
			require.Equal(t, tc.want, string(res.Output))
		})
	}
}

// What an error quotes of a provider's answer is redacted as it will be
// stored: the stored text drops NUL bytes, which must not join a key a
// provider split with them, and the body is cut to MaxErrorBody after the
// redaction, so a key across the cut leaves no prefix.
func TestHTTPHandlerRedactsErrorsAsStored(t *testing.T) {
	t.Parallel()
	const key = "sk-aaaaaaab"
	bodies := []string{
		"invalid key: s\x00k-aaaa\x00aaa\x00b",
		strings.Repeat("x", 16) + " " + key + " and more",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.Header.Get("Batchq-Job-Id"))
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(bodies[i]))
	}))
	t.Cleanup(srv.Close)
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, MaxErrorBody: 20, Header: http.Header{"Authorization": {"Bearer " + key}}})
	require.NoError(t, err)
	for i := range bodies {
		_, err := h(context.Background(), &queue.Job{ID: int64(i), Tenant: "t", Attempt: 1, Payload: []byte(`{}`)})
		require.Error(t, err)
		stored := strings.ReplaceAll(err.Error(), "\x00", "")
		require.NotContains(t, stored, key[:4], "%d: %q", i, err)
		require.Contains(t, stored, "[re", "%d: %q", i, err)
	}
}

// Through a worker pool: no outcome's result or error, no job's last error
// and no log line holds a key that a provider echoed back, in any case.
func TestHTTPSecretsStayOutOfOutcomesAndLogs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 1})
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := queue.NewClient(b.pool, queue.Config{Logger: log})
	require.NoError(t, err)
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: echoServer(t).URL, Header: echoHeader})
	require.NoError(t, err)

	// The jobs a retry may help get a second attempt, so that the error of
	// the first waits in the job's last_error.
	var jobs []queue.NewJob
	want := map[string]int{} // outcome: jobs
	add := func(payload []byte, maxAttempts int, outcome string) {
		jobs = append(jobs, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Payload: payload, MaxAttempts: maxAttempts})
		want[outcome]++
	}
	for _, e := range echoes {
		add(echoPayload(e.name, http.StatusOK), 1, "succeeded")
		add(echoPayload(e.name, http.StatusBadRequest), 1, "discarded")
		add(echoPayload(e.name, http.StatusServiceUnavailable), 2, "failed")
		add(echoInReason(e.name, http.StatusBadRequest), 1, "discarded")
		add(echoInReason(e.name, http.StatusServiceUnavailable), 2, "failed")
		if e.name != "bearer" && e.name != "json-escaped" { // not a status line net/http quotes whole
			add(echoPayload(e.name, 0), 2, "failed")
		}
	}
	_, err = client.EnqueueMany(b.ctx, jobs)
	require.NoError(t, err)
	var mu sync.Mutex
	lastErrors := map[int64]string{} // of the jobs found waiting to retry
	require.NoError(t, client.Work(b.ctx, queue.WorkerConfig{
		Queue: b.queue, Handler: h, Concurrency: 4, Drain: true, PollInterval: 20 * time.Millisecond, Logger: log,
		// The pool logs no handler's error itself; an application's hook
		// may log every one it reports.
		OnEvent: func(e queue.Event) {
			if e.Err != nil {
				log.Info("event", "kind", e.Kind, "err", e.Err)
			}
			if e.Kind == queue.EventFinished && e.Outcome == "retrying" {
				// Reported once written; the retry is a second away.
				var last string
				err := b.pool.QueryRow(b.ctx, `SELECT coalesce(last_error, '') FROM batchq.jobs WHERE id = $1 AND state = 'retrying'`, e.Job.ID).Scan(&last)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					last = "reading it failed: " + err.Error()
				}
				lastErrors[e.Job.ID] = last
			}
		},
	}))
	require.Len(t, lastErrors, want["failed"], "each job given two attempts waited to retry")
	for id, last := range lastErrors {
		require.False(t, leaks(last), "job %d: last_error %s", id, last)
		require.Contains(t, last, "[redacted]", "job %d", id)
	}

	rows, err := b.pool.Query(b.ctx, `SELECT job_id, outcome::text, coalesce(result::text, ''), coalesce(error, '') FROM batchq.outcomes`)
	require.NoError(t, err)
	defer rows.Close() // a failed require must not leave the pool waiting for it
	outcomes := map[string]int{}
	n := 0
	for rows.Next() {
		var (
			id                      int64
			outcome, result, reason string
		)
		require.NoError(t, rows.Scan(&id, &outcome, &result, &reason))
		n++
		outcomes[outcome]++
		require.False(t, leaks(result), "job %d: result %s", id, result)
		require.False(t, leaks(reason), "job %d: error %s", id, reason)
		require.Contains(t, result+reason, "[redacted]", "job %d", id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(jobs), n)
	require.Equal(t, want, outcomes)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
	require.Contains(t, logs.String(), "[redacted]")
	require.False(t, leaks(logs.String()), "%s", logs)
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Each attempt's request goes out once: net/http's Transport does not re-send
// it on a new connection when the provider closes a reused one without an
// answer, and the attempt fails, to be retried by the queue with the next
// Batchq-Attempt.
func TestHTTPHandlerSendsEachAttemptOnce(t *testing.T) {
	t.Parallel()

	// arrivals records each request's job and attempt; hangUp says which
	// job's first request the server reads and then closes the connection
	// on, without an answer.
	type arrivals struct {
		mu   sync.Mutex
		seen map[string][]string // job id: Batchq-Attempt of each arrival
	}
	server := func(t *testing.T, hangUp string) (*httptest.Server, *arrivals) {
		a := &arrivals{seen: map[string][]string{}}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			job := r.Header.Get("Batchq-Job-Id")
			a.mu.Lock()
			a.seen[job] = append(a.seen[job], r.Header.Get("Batchq-Attempt"))
			first := len(a.seen[job]) == 1
			a.mu.Unlock()
			if job == hangUp && first {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					panic(err)
				}
				conn.Close()
				return
			}
			w.Write([]byte(`{"usage":{"total_tokens":1}}`))
		}))
		t.Cleanup(srv.Close)
		return srv, a
	}
	seen := func(a *arrivals, job string) []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Clone(a.seen[job])
	}

	t.Run("ReusedConnectionClosedBeforeTheAnswer", func(t *testing.T) {
		t.Parallel()
		srv, a := server(t, "2")
		h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Client: srv.Client()})
		require.NoError(t, err)
		_, err = h(context.Background(), &queue.Job{ID: 1, Tenant: "t", Attempt: 1, Payload: []byte(`{"n":1}`)})
		require.NoError(t, err)

		// Job 2 goes out on job 1's connection, kept alive: the case the
		// Transport retries when it may.
		var reused []bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) },
		})
		_, err = h(ctx, &queue.Job{ID: 2, Tenant: "t", Attempt: 1, Payload: []byte(`{"n":2}`)})
		require.Equal(t, []string{"1"}, seen(a, "2"), "Batchq-Attempt 1 arrived more than once")
		require.Equal(t, []bool{true}, reused, "one connection, the reused one")
		require.Error(t, err)
		require.False(t, queue.IsPermanent(err), "retried by the queue")
		require.False(t, errors.Is(err, queue.ErrRateLimited))
		require.Equal(t, "batchq: POST "+srv.URL+": the connection closed before an answer: EOF", err.Error())
	})

	t.Run("WorkerRetriesWithTheNextAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{MaxAttempts: 3})
		first := b.enqueue(t, "t", 1)
		second := b.enqueue(t, "t", 1)
		srv, a := server(t, strconv.FormatInt(second, 10))
		h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Client: srv.Client()})
		require.NoError(t, err)
		// One handler at a time: the second job's call reuses the first's
		// connection.
		require.NoError(t, b.client.Work(b.ctx, queue.WorkerConfig{
			Queue: b.queue, Handler: h, Concurrency: 1, BatchSize: 1, Drain: true, PollInterval: 20 * time.Millisecond,
		}))
		require.Equal(t, []string{"1"}, seen(a, strconv.FormatInt(first, 10)))
		require.Equal(t, []string{"1", "2"}, seen(a, strconv.FormatInt(second, 10)), "each attempt arrives once")
		var outcome string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT outcome::text || ' after ' || attempts FROM batchq.outcomes WHERE job_id = $1`, second).Scan(&outcome))
		require.Equal(t, "succeeded after 2", outcome)
	})

	// The request is not replayable, with or without a payload: its body
	// has no GetBody, so neither the Transport nor a redirect re-sends it.
	t.Run("NotReplayable", func(t *testing.T) {
		t.Parallel()
		for payload, sent := range map[string]string{`{"n":1}`: `{"n":1}`, "": "{}"} {
			var req *http.Request
			var body []byte
			client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				req = r
				body, _ = io.ReadAll(r.Body)
				return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
			})}
			h, err := queue.HTTPHandler(queue.HTTPConfig{Target: "http://provider.invalid/v1", Client: client})
			require.NoError(t, err)
			_, err = h(context.Background(), &queue.Job{ID: 1, Tenant: "t", Attempt: 1, Payload: []byte(payload)})
			require.NoError(t, err)
			require.Nil(t, req.GetBody, "payload %q", payload)
			require.NotEqual(t, http.NoBody, req.Body, "payload %q", payload)
			require.Equal(t, int64(len(sent)), req.ContentLength, "payload %q", payload)
			require.Equal(t, sent, string(body))
			require.Equal(t, "batchq-1", req.Header.Get("Idempotency-Key"))
		}
	})

	// No redirect is followed: a 307 or 308 would send the payload again,
	// a 301, 302 or 303 the headers (the key, the attempt) as a GET, to
	// wherever the answer points, with the default client and with one
	// given whose CheckRedirect is nil.
	t.Run("RedirectNotFollowed", func(t *testing.T) {
		t.Parallel()
		srv, a := server(t, "")
		for _, client := range []*http.Client{nil, srv.Client()} {
			for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
				redirect := httptest.NewServer(http.RedirectHandler(srv.URL, code))
				t.Cleanup(redirect.Close)
				h, err := queue.HTTPHandler(queue.HTTPConfig{Target: redirect.URL, Client: client})
				require.NoError(t, err)
				_, err = h(context.Background(), &queue.Job{ID: 1, Tenant: "t", Attempt: 1, Payload: []byte(`{}`)})
				require.ErrorContains(t, err, fmt.Sprintf("%d %s", code, http.StatusText(code)))
				require.True(t, queue.IsPermanent(err))
				require.Empty(t, seen(a, "1"), "%d", code)
			}
		}
		require.Nil(t, srv.Client().CheckRedirect, "the client given is left as it was")
	})
}

// What redaction adds to a call whose answer is large: the same 4 MiB
// answer, like a chat completion's with escapes and text outside ASCII,
// without and with two keys to look for.
func BenchmarkHTTPHandlerRedaction(b *testing.B) {
	chunk := `{"role":"assistant","content":"A line with \"quotes\", an sk-Live/9fQ near miss,\nünïcödé and 日本語."},`
	body := []byte(`{"choices":[` + strings.Repeat(chunk, (4<<20)/len(chunk)) + `{}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	b.Cleanup(srv.Close)
	for _, tc := range []struct {
		name   string
		header http.Header
	}{{"NoSecrets", nil}, {"TwoSecrets", echoHeader}} {
		b.Run(tc.name, func(b *testing.B) {
			h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Header: tc.header, Client: srv.Client()})
			require.NoError(b, err)
			job := &queue.Job{ID: 1, Tenant: "t", Attempt: 1, Payload: []byte(`{}`)}
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := h(context.Background(), job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An operator's Cancel of a running job aborts the HTTP handler's request in
// flight: the pool cancels the handler's context at the job's next
// heartbeat, the provider sees its request go away, and the job ends as
// 'cancelled' after that one attempt, not retried.
func TestHTTPHandlerAbortsTheRequestOfACancelledJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Second, MaxAttempts: 3})
	id := b.enqueue(t, "t", 1)

	arrived := make(chan struct{}, 10) // one per request
	aborted := make(chan struct{})     // closed when the request's context is done
	release := make(chan struct{})     // closed when the test ends
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		// Answer nothing until the client goes away. The server notices
		// the connection close, and ends the request's context, only once
		// the body has been read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			close(aborted)
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL})
	require.NoError(t, err)

	returned := make(chan error, 1)
	ctx, cancel := context.WithCancel(b.ctx)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, Drain: true, PollInterval: 20 * time.Millisecond,
		HeartbeatInterval: 50 * time.Millisecond, MaintainInterval: -1, ShutdownTimeout: time.Second,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			res, err := h(ctx, j)
			returned <- err
			return res, err
		},
	})
	var once sync.Once
	var workErr error
	stop := func() error { once.Do(func() { workErr = wait() }); return workErr }
	t.Cleanup(func() { cancel(); _ = stop() }) // also when the test fails early
	// First of all: the provider answers, so a handler that ignored its
	// context returns, and the pool and srv.Close with it.
	t.Cleanup(func() { close(release) })

	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the job's request never reached the provider")
	}
	require.NoError(t, b.client.Cancel(b.ctx, id, "operator: not needed"))
	select {
	case <-aborted:
	case <-time.After(20 * time.Second):
		t.Fatal("the provider never saw the request of the cancelled job aborted")
	}
	select {
	case err := <-returned:
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, queue.IsPermanent(err))
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not return after its request was aborted")
	}
	require.NoError(t, stop(), "Drain returns once the job is finished")

	var outcome, reason string
	var attempts int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT outcome::text, attempts, coalesce(error, '') FROM batchq.outcomes WHERE job_id = $1`, id).
		Scan(&outcome, &attempts, &reason))
	require.Equal(t, "cancelled", outcome)
	require.Equal(t, 1, attempts, "not retried")
	require.Equal(t, "operator: not needed", reason)
	require.Empty(t, arrived, "one request in all")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// countingBody is an endless response body that counts what was read.
type countingBody struct{ n *int64 }

func (b countingBody) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	*b.n += int64(len(p))
	return len(p), nil
}

func (countingBody) Close() error { return nil }

// A failed response's body is read only as far as the error keeps it (and
// a margin for a secret across the cut), however long it is: handlers that
// all got a proxy's error page of megabytes held it in memory, each.
func TestHTTPHandlerReadsAnErrorsHeadOnly(t *testing.T) {
	t.Parallel()
	for _, status := range []int{500, 400, 429} {
		var read int64
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d x", status), Header: http.Header{},
				Body: countingBody{&read}, Request: r}, nil
		})}
		h, err := queue.HTTPHandler(queue.HTTPConfig{Target: "http://provider.invalid/", Client: client, MaxErrorBody: 100})
		require.NoError(t, err)
		_, err = h(context.Background(), &queue.Job{ID: 1, Payload: []byte(`{}`)})
		require.Error(t, err)
		require.LessOrEqual(t, read, int64(100+64<<10+32<<10), "status %d: bytes read", status)
		if status != 429 {
			require.Contains(t, err.Error(), strings.Repeat("x", 100), "status %d: the head is kept", status)
		}
	}
}

// A successful answer larger than a result is held (an embedding call of a
// few thousand inputs, say) still says what it cost: its usage, written after
// the data, is read from the whole body. Its head is the result.
func TestHTTPHandlerReadsTheUsageOfALargeAnswer(t *testing.T) {
	t.Parallel()
	// A string of about 40 MiB, so that the { and " in it must be skipped,
	// made of whole copies of the filler so that it stays one JSON string.
	const (
		head   = `{"object":"list","data":[{"embedding":"`
		filler = `{\"usage\":{\"total_tokens\":1},\"x\":[1,2]} `
		tail   = `"}],"model":"e","usage":{"prompt_tokens":1234,"total_tokens":1234}}`
		size   = len(head) + (40<<20)/len(filler)*len(filler) + len(tail)
	)
	var read int64
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body := io.MultiReader(strings.NewReader(head),
			io.LimitReader(&repeatReader{s: filler}, int64(size-len(head)-len(tail))), strings.NewReader(tail))
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{},
			Body: io.NopCloser(countingReader{body, &read}), Request: r}, nil
	})}
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: "http://provider.invalid/", Client: client})
	require.NoError(t, err)
	res, err := h(context.Background(), &queue.Job{ID: 1, Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, int64(1234), res.ActualCost, "the usage at the end of the body")
	require.Equal(t, int64(size), read, "the whole body was read")
	require.Equal(t, 16<<20, len(res.Output), "the head is the result")
	require.True(t, strings.HasPrefix(string(res.Output), `{"object":"list"`))

	// The provider answered 2xx, and billed the call: a rest that breaks
	// off past what is held leaves the cost unknown, not the call failed.
	client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body := io.MultiReader(strings.NewReader(`{"data":"`), io.LimitReader(&repeatReader{s: "x"}, 20<<20),
			iotest.ErrReader(errors.New("connection reset by peer")))
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(body), Request: r}, nil
	})}
	h, err = queue.HTTPHandler(queue.HTTPConfig{Target: "http://provider.invalid/", Client: client})
	require.NoError(t, err)
	res, err = h(context.Background(), &queue.Job{ID: 2, Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.Zero(t, res.ActualCost)
	require.Equal(t, 16<<20, len(res.Output))
}

// repeatReader reads s over and over, each read going on where the last
// stopped.
type repeatReader struct {
	s   string
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// A header the handler or its HTTP client sets itself is refused by name,
// not accepted and then never sent as given.
func TestHTTPHandlerRefusesHeadersItSetsItself(t *testing.T) {
	t.Parallel()
	for name, why := range map[string]string{
		"idempotency-key":   "the worker sets Idempotency-Key itself",
		"Content-Type":      "the worker sets Content-Type itself",
		"Batchq-Tenant":     "the worker sets the Batchq- headers itself",
		"Host":              "the worker sets Host itself, from its target",
		"Content-Length":    "the worker's HTTP client sets Content-Length itself, from the payload",
		"Connection":        "a hop-by-hop header",
		"transfer-encoding": "the worker's HTTP client sets Transfer-Encoding itself",
	} {
		_, err := queue.HTTPHandler(queue.HTTPConfig{Target: "http://127.0.0.1:1/x", Header: http.Header{name: {"v"}}})
		require.ErrorContains(t, err, fmt.Sprintf("batchq: HTTPHandler: Header %q: %s", name, why), name)
	}
	_, err := queue.HTTPHandler(queue.HTTPConfig{Target: "http://127.0.0.1:1/x",
		Header: http.Header{"Authorization": {"Bearer k"}, "X-Team": {"a"}}})
	require.NoError(t, err)
}
