package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// testToken is the token of the consoles that act.
const testToken = "0123456789abcdef-console-token"

// testBundle is a console over a database holding a small story: queue
// docs, where acme (weight 3), globex and initech have queued and finished
// jobs, acme a discarded one and globex a running one; a queue with
// nothing; and a quota key that received a 429.
type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	url    string // the database's URL
	client *queue.Client
	h      http.Handler
	// discarded is the id of acme's discarded job, done one of a job that
	// succeeded with a result.
	discarded, done int64
}

func setup(t *testing.T, opts *console.Options) *testBundle {
	t.Helper()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	b := &testBundle{ctx: ctx, pool: pool, url: url, client: client}
	b.fill(t)
	b.h = b.handler(t, client, opts)
	return b
}

func (b *testBundle) handler(t *testing.T, client *queue.Client, opts *console.Options) http.Handler {
	t.Helper()
	h, err := console.Handler(client, opts)
	require.NoError(t, err)
	return h
}

func (b *testBundle) fill(t *testing.T) {
	t.Helper()
	ctx := b.ctx
	require.NoError(t, b.client.CreateQueue(ctx, queue.QueueConfig{Name: "docs"}))
	require.NoError(t, b.client.CreateQueue(ctx, queue.QueueConfig{Name: "empty"}))
	require.NoError(t, b.client.SetTenant(ctx, queue.Tenant{Name: "acme", Weight: 3}))
	enqueue := func(perTenant int) {
		var jobs []queue.NewJob
		for i := range 3 * perTenant {
			tenant := []string{"acme", "globex", "initech"}[i%3]
			jobs = append(jobs, queue.NewJob{Queue: "docs", Tenant: tenant, Kind: "summarize", Cost: 100,
				Payload: []byte(fmt.Sprintf(`{"doc":"secret-payload-%d"}`, i))})
		}
		_, err := b.client.EnqueueMany(ctx, jobs)
		require.NoError(t, err)
	}
	// Three jobs each, all claimed: acme's first is discarded, globex's last
	// stays running, the rest succeed. Then four more each, queued.
	enqueue(3)
	claimed, err := b.client.Claim(ctx, "docs", &queue.ClaimOpts{Limit: 9})
	require.NoError(t, err)
	require.Len(t, claimed, 9)
	globex := 0
	for _, j := range claimed {
		switch {
		case j.Tenant == "acme" && b.discarded == 0:
			_, err := b.client.Fail(ctx, j, errors.New("provider said: malformed request"), &queue.FailOpts{Final: true})
			require.NoError(t, err)
			b.discarded = j.ID
		case j.Tenant == "globex" && globex == 2:
		default:
			if j.Tenant == "globex" {
				globex++
			}
			require.NoError(t, b.client.Complete(ctx, j, queue.Result{ActualCost: 100, Output: []byte(`{"answer":"secret-result"}`)}))
			b.done = j.ID
		}
	}
	enqueue(4)
	// A quota key whose provider said 429 once.
	th, err := b.client.Throttle("sim/chat", throttle.Config{Reserve: 0.2})
	require.NoError(t, err)
	require.NoError(t, th.TooManyRequests(ctx, time.Now(), time.Now(), 30*time.Second))
}

type response struct {
	status int
	body   string
	header http.Header
}

// do serves one request; form, when not nil, is its url-encoded body.
func (b *testBundle) do(t *testing.T, h http.Handler, method, path string, form url.Values, header http.Header, cookies ...*http.Cookie) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, path, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		r.Header[k] = v
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return response{w.Code, w.Body.String(), w.Result().Header}
}

func (b *testBundle) get(t *testing.T, path string, cookies ...*http.Cookie) response {
	t.Helper()
	return b.do(t, b.h, http.MethodGet, path, nil, nil, cookies...)
}

// signIn signs in with the token and returns the session cookie and the
// CSRF token the pages' forms carry.
func (b *testBundle) signIn(t *testing.T, h http.Handler) (*http.Cookie, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {testToken}, "next": {"/queues/docs"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	require.Equal(t, "/queues/docs", w.Header().Get("Location"))
	var session *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == "batchq_console" {
			session = c
		}
	}
	require.NotNil(t, session, "no session cookie")
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	page := b.do(t, h, http.MethodGet, "/queues/docs", nil, nil, session)
	require.Equal(t, http.StatusOK, page.status)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page.body)
	require.NotNil(t, m, "the queue page has no form with a CSRF token:\n%s", page.body)
	return session, m[1]
}

func (b *testBundle) paused(t *testing.T, name string) bool {
	t.Helper()
	var paused bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT paused_at IS NOT NULL FROM batchq.queues WHERE name = $1`, name).Scan(&paused))
	return paused
}

func (b *testBundle) scalar(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}
