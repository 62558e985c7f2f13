package console_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/migrations"
	"github.com/batchq/batchq/queue"
)

func TestConsoleOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res := b.get(t, "/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Equal(t, "text/html; charset=utf-8", res.header.Get("Content-Type"))
	require.Contains(t, res.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	docs := row(t, res.body, `<tr data-queue="docs">`)
	// 21 jobs: 8 finished (7 succeeded, 1 discarded), 1 running, 12 queued.
	require.Contains(t, docs, `data-field="queued-jobs">12<`)
	require.Contains(t, docs, `data-field="queued-tokens">1,200<`)
	require.Contains(t, docs, `data-field="running">1<`)
	require.Contains(t, docs, `data-field="scheduled">0<`)
	require.Contains(t, docs, `data-field="state">running<`)
	cells := regexp.MustCompile(`<td class="n">(\d+)</td>`).FindAllStringSubmatch(docs, -1)
	var outcomes []string
	for _, c := range cells {
		outcomes = append(outcomes, c[1])
	}
	// succeeded, failed, expired, discarded, cancelled
	require.Equal(t, []string{"7", "0", "0", "1", "0"}, outcomes)
	require.Contains(t, res.body, `<tr data-queue="empty">`)

	key := row(t, res.body, `<tr data-key="sim/chat">`)
	require.Contains(t, key, `data-field="limited">1<`, "the 429 is counted")
	require.Contains(t, key, `class="paused"`, "the key is paused for 30s after the 429")
	require.Contains(t, res.body, `id="read-only"`, "a console without a token says it is read-only")
}

func TestConsoleQueuePage(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{TopTenants: 2})

	t.Run("tenant rows, the others summed, and the chart", func(t *testing.T) {
		res := b.get(t, "/queues/docs?window=1h")
		require.Equal(t, http.StatusOK, res.status, res.body)
		tenants := regexp.MustCompile(`<tr class="tenant" data-tenant="([^"]+)">`).FindAllStringSubmatch(res.body, -1)
		require.Len(t, tenants, 2, "the top 2 tenants have rows")
		// All have 400 tokens queued; acme and initech were served 300 in
		// the window, globex 200.
		require.Equal(t, "acme", tenants[0][1])
		require.Equal(t, "initech", tenants[1][1])
		others := row(t, res.body, `<tr class="others"`)
		require.Contains(t, others, "others (1 tenants)")
		require.Contains(t, others, `<td class="n">25.0%</td>`, "globex's token share: 200 of 800")
		acme := row(t, res.body, `<tr class="tenant" data-tenant="acme">`)
		require.Contains(t, acme, `<td class="n">3</td>`, "acme's weight")
		require.Contains(t, acme, `<td class="n">37.5%</td>`, "acme's token share: 300 of 800")
		require.Contains(t, acme, `<td class="n">60.0%</td>`, "acme's weight share: 3 of 5")
		require.Regexp(t, `id="share-chart" src="/queues/docs/chart.svg\?window=1h&amp;at=\d+"`, res.body)
		require.Contains(t, res.body, `<option selected>1h</option>`)
	})

	t.Run("the live part alone", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodGet, "/queues/docs", nil, http.Header{"X-Batchq-Live": {"1"}})
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.NotContains(t, res.body, "<html")
		require.Contains(t, res.body, `id="tenants"`)
		require.Contains(t, res.body, `id="share-chart"`)
	})

	t.Run("a bad window names the parameter and its values", func(t *testing.T) {
		res := b.get(t, "/queues/docs?window=2d")
		require.Equal(t, http.StatusBadRequest, res.status)
		require.Contains(t, res.body, "window &#34;2d&#34;: must be one of 1m, 5m, 15m, 1h, 6h, 24h")
	})

	t.Run("no such queue", func(t *testing.T) {
		res := b.get(t, "/queues/nope")
		require.Equal(t, http.StatusNotFound, res.status)
		require.Contains(t, res.body, "no queue &#34;nope&#34;")
	})
}

func TestConsoleChart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res := b.get(t, "/queues/docs/chart.svg?window=15m")
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Equal(t, "image/svg+xml", res.header.Get("Content-Type"))
	require.True(t, strings.HasPrefix(strings.TrimSpace(res.body), "<?xml") || strings.HasPrefix(res.body, "<svg"))
	for _, s := range []string{"acme", "globex", "initech", "fair share of acme: 60%", "fair share of initech and globex: 20%", "minutes before now"} {
		require.Contains(t, res.body, s)
	}

	// Every job finished within a moment, so over 24h (steps of 24
	// minutes) one step served all the tokens: each tenant's share is
	// still a line, as well as its swatch in the legend (the palette's
	// first three colours, 2 points wide).
	day := b.get(t, "/queues/docs/chart.svg?window=24h")
	require.Equal(t, http.StatusOK, day.status, day.body)
	for _, color := range []string{"#E67814", "#1E64C8", "#28A046"} {
		lines := regexp.MustCompile(`<path d="M[^"]*L[^"]*" style="fill:none;stroke:`+color+`;stroke-width:2"`).FindAllString(day.body, -1)
		require.Len(t, lines, 2, "the line and the legend's swatch of %s:\n%s", color, day.body)
	}

	empty := b.get(t, "/queues/empty/chart.svg")
	require.Equal(t, http.StatusOK, empty.status)
	require.Contains(t, empty.body, "served no tokens in the last 15m")

	require.Equal(t, http.StatusNotFound, b.get(t, "/queues/nope/chart.svg").status)
}

func TestConsoleTenantPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res := b.get(t, "/queues/docs/tenants/acme")
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Contains(t, res.body, "provider said: malformed request", "the discarded job's error")
	require.Contains(t, res.body, `<a href="/jobs/`+strconv.FormatInt(b.discarded, 10)+`">`)
	require.Contains(t, res.body, "weight <strong>3</strong>")
	require.Contains(t, res.body, "bound <strong>10,000</strong> queued jobs (the queue's)")
	require.NotContains(t, res.body, `id="cancel-form"`, "no action without a session")

	unknown := b.get(t, "/queues/nope/tenants/acme")
	require.Equal(t, http.StatusNotFound, unknown.status)
}

// A tenant page names a tenant the queue knows: one that enqueued there
// (its jobs may all have finished, their outcomes pruned), has settings
// there or for every queue, or finished jobs there in the last day. Any
// other name is a 404, and a name no tenant can have a 400 with the rule.
func TestConsoleTenantPageKnowsOnlyTenantsTheQueueKnows(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := b.ctx

	// "empty" holds nothing: each tenant below is known there in one way.
	// Enqueued there, all finished, and the outcomes pruned: its ring row.
	_, err := b.client.Enqueue(ctx, queue.NewJob{Queue: "empty", Tenant: "finished", Cost: 10})
	require.NoError(t, err)
	claimed, err := b.client.Claim(ctx, "empty", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, b.client.Complete(ctx, claimed[0], queue.Result{}))
	_, err = b.pool.Exec(ctx, `DELETE FROM batchq.outcomes WHERE tenant = 'finished'`)
	require.NoError(t, err)
	// Settings for this queue only, and for every queue.
	_, err = b.client.UpdateQueueTenant(ctx, "empty", "planned", queue.TenantUpdate{Weight: ptr(2.0)})
	require.NoError(t, err)
	require.NoError(t, b.client.SetTenant(ctx, queue.Tenant{Name: "everywhere", Weight: 5}))
	// Outcomes of the last day in a queue of that name that was deleted and
	// made again, which took its ring with it: the queue page lists such a
	// tenant in its window.
	require.NoError(t, b.client.CreateQueue(ctx, queue.QueueConfig{Name: "again"}))
	_, err = b.client.Enqueue(ctx, queue.NewJob{Queue: "again", Tenant: "before", Cost: 10})
	require.NoError(t, err)
	claimed, err = b.client.Claim(ctx, "again", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, b.client.Complete(ctx, claimed[0], queue.Result{}))
	_, err = b.client.DeleteQueue(ctx, "again")
	require.NoError(t, err)
	require.NoError(t, b.client.CreateQueue(ctx, queue.QueueConfig{Name: "again"}))

	for _, path := range []string{
		"/queues/empty/tenants/finished", "/queues/empty/tenants/planned", "/queues/empty/tenants/everywhere",
		"/queues/again/tenants/before", "/queues/docs/tenants/globex",
	} {
		res := b.get(t, path)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", path, res.body)
	}

	t.Run("a tenant the queue does not know", func(t *testing.T) {
		// globex has jobs in docs only; nobody is nowhere.
		for _, tc := range []struct{ queue, tenant string }{{"empty", "globex"}, {"docs", "nobody"}, {"empty", "before"}} {
			res := b.get(t, "/queues/"+tc.queue+"/tenants/"+tc.tenant)
			require.Equal(t, http.StatusNotFound, res.status, "%s in %s: %s", tc.tenant, tc.queue, res.body)
			require.Contains(t, res.body, "no tenant &#34;"+tc.tenant+"&#34; in queue &#34;"+tc.queue+"&#34;")
		}
	})

	t.Run("a name no tenant can have", func(t *testing.T) {
		for _, tc := range []struct{ name, want string }{
			{strings.Repeat("a", 257), "must be at most 256 bytes (got 257)"},
			{"a%01b", `must not contain control characters (got &#34;a\u0001b&#34;)`},
			{"a%7Fb", "must not contain control characters (got &#34;a\x7fb&#34;)"},
		} {
			res := b.get(t, "/queues/docs/tenants/"+tc.name)
			require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", tc.name, res.body)
			require.Contains(t, res.body, "no tenant can be named so: a tenant&#39;s name "+tc.want)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestConsoleJobPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	t.Run("a finished job whole, payload and result", func(t *testing.T) {
		res := b.get(t, "/jobs/"+strconv.FormatInt(b.done, 10))
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Contains(t, res.body, "secret-result")
		require.Contains(t, res.body, `data-field="state">succeeded<`)
	})
	t.Run("a discarded job with its payload and error", func(t *testing.T) {
		res := b.get(t, "/jobs/"+strconv.FormatInt(b.discarded, 10))
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Contains(t, res.body, "secret-payload")
		require.Contains(t, res.body, "provider said: malformed request")
	})
	t.Run("a queued job", func(t *testing.T) {
		id := b.scalar(t, `SELECT min(id) FROM batchq.jobs WHERE state = 'queued'`)
		res := b.get(t, "/jobs/"+strconv.FormatInt(id, 10))
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Contains(t, res.body, `data-field="state">queued<`)
		require.Contains(t, res.body, "secret-payload")
	})
	t.Run("no such job", func(t *testing.T) {
		require.Equal(t, http.StatusNotFound, b.get(t, "/jobs/999999").status)
	})
	t.Run("a bad id", func(t *testing.T) {
		// One past the largest id is a whole number too: the rule names the
		// range.
		for _, id := range []string{"x1", "0", "-1", "9223372036854775808"} {
			res := b.get(t, "/jobs/"+id)
			require.Equal(t, http.StatusBadRequest, res.status, id)
			require.Contains(t, res.body, "job id &#34;"+id+"&#34;: must be a whole number from 1 to 9223372036854775807", id)
		}
	})
}

func TestConsoleStatic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	js := b.get(t, "/static/console.js")
	require.Equal(t, http.StatusOK, js.status)
	require.Contains(t, js.body, "X-Batchq-Live")
	require.Equal(t, http.StatusOK, b.get(t, "/static/console.css").status)
	require.Equal(t, http.StatusNotFound, b.get(t, "/static/nope.js").status)
	require.Equal(t, http.StatusNotFound, b.get(t, "/static/").status, "no listing of the files")
}

// Every path that names no page is the console's own 404 page, not the
// mux's plain text; a path that takes another method is its 405.
func TestConsoleAnswersNoSuchPageWithItsOwnPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, path := range []string{"/queues/docs/tenants/", "/queues/docs/tenants", "/queues/", "/jobs/", "/nope",
		"/queues/docs/chart.svg/more", "/static/", "/static/nope.js", "/static/console.css/"} {
		res := b.get(t, path)
		require.Equal(t, http.StatusNotFound, res.status, path)
		require.Equal(t, "text/html; charset=utf-8", res.header.Get("Content-Type"), path)
		require.Contains(t, res.body, `<p class="error" id="error">`, path)
		require.Contains(t, res.body, `href="/">back to the overview`, path)
		require.NotContains(t, res.body, "404 page not found", path)
	}
	res := b.get(t, "/queues/docs/tenants/")
	require.Contains(t, res.body, "no page at /queues/docs/tenants/: the console&#39;s pages are /, /queues/QUEUE, /queues/QUEUE/tenants/TENANT and /jobs/ID")
	require.Contains(t, b.get(t, "/static/nope.js").body, "no file /static/nope.js")

	for _, tc := range []struct{ method, path, allow, says string }{
		{http.MethodPost, "/queues/docs", "GET, HEAD", "POST /queues/docs: this address takes GET only"},
		{http.MethodGet, "/queues/docs/pause", "POST", "GET /queues/docs/pause: this address takes POST only"},
		{http.MethodPut, "/login", "GET, HEAD, POST", "PUT /login: this address takes GET and POST only"},
	} {
		res := b.do(t, b.h, tc.method, tc.path, nil, nil)
		require.Equal(t, http.StatusMethodNotAllowed, res.status, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, res.header.Get("Allow"), "%s %s", tc.method, tc.path)
		require.Contains(t, res.body, tc.says)
	}

	// Under a base path, the page names the path the browser asked for.
	h := b.handler(t, b.client, &console.Options{BasePath: "/batchq"})
	mux := http.NewServeMux()
	mux.Handle("/batchq/", http.StripPrefix("/batchq", h))
	res = b.do(t, mux, http.MethodGet, "/batchq/queues/docs/tenants/", nil, nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Contains(t, res.body, "no page at /batchq/queues/docs/tenants/: the console&#39;s pages are /batchq/, /batchq/queues/QUEUE")
	require.Contains(t, res.body, `href="/batchq/">back to the overview`)
}

func TestConsoleBasePath(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := b.handler(t, b.client, &console.Options{BasePath: "/batchq", Token: testToken})
	mux := http.NewServeMux()
	mux.Handle("/batchq/", http.StripPrefix("/batchq", h))
	res := b.do(t, mux, http.MethodGet, "/batchq/", nil, nil)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Contains(t, res.body, `href="/batchq/queues/docs"`)
	require.Contains(t, res.body, `src="/batchq/static/console.js"`)
	require.Contains(t, res.body, `href="/batchq/login?next=%2f"`)
}

func TestConsoleOptionsAreChecked(t *testing.T) {
	t.Parallel()
	client, err := queue.NewClient(nil, queue.Config{})
	require.Error(t, err)
	require.Nil(t, client)
	_, err = console.Handler(nil, nil)
	require.EqualError(t, err, "batchq: console: client is nil")

	b := setup(t, nil)
	for _, tc := range []struct {
		o    console.Options
		want string
	}{
		{console.Options{Token: "short"}, "batchq: console: token: must be at least 16 bytes (got 5)"},
		{console.Options{BasePath: "batchq"}, `batchq: console: base path "batchq": must start with / and not end with it`},
		{console.Options{BasePath: "/batchq/"}, `batchq: console: base path "/batchq/": must start with / and not end with it`},
		{console.Options{TopTenants: -1}, "batchq: console: top tenants: must be in 1..1000 (got -1)"},
		{console.Options{Refresh: time.Millisecond}, "batchq: console: refresh: must be from 100ms to 24h0m0s (got 1ms)"},
		// A browser's timer takes a longer delay for none: it would refresh
		// without pause.
		{console.Options{Refresh: 25 * time.Hour}, "batchq: console: refresh: must be from 100ms to 24h0m0s (got 25h0m0s)"},
		{console.Options{Reserve: 1}, "batchq: console: reserve: must be in [0,1) (got 1)"},
	} {
		_, err := console.Handler(b.client, &tc.o)
		require.EqualError(t, err, tc.want)
	}
}

// row returns the table row of body that starts with start.
func row(t *testing.T, body, start string) string {
	t.Helper()
	i := strings.Index(body, start)
	require.GreaterOrEqual(t, i, 0, "no %s in:\n%s", start, body)
	end := strings.Index(body[i:], "</tr>")
	require.Greater(t, end, 0)
	return body[i : i+end]
}

// A tenant whose name needs escaping in a path has its page, its links and
// its live refresh.
func TestConsoleEscapesNames(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "docs", Tenant: "team a/b?c", Cost: 10})
	require.NoError(t, err)
	page := b.get(t, "/queues/docs")
	require.Contains(t, page.body, `href="/queues/docs/tenants/team%20a%2Fb%3Fc"`)
	res := b.get(t, "/queues/docs/tenants/team%20a%2Fb%3Fc")
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Contains(t, res.body, "Tenant team a/b?c")
	require.Contains(t, res.body, `data-src="/queues/docs/tenants/team%20a%2Fb%3Fc"`)
	require.Contains(t, res.body, `<span data-field="queued-jobs">1</span>`)
}

// A tenant, kind or error holding a bidirectional control (U+202E turns the
// text after it around) shows it as \u202e on every page and in the chart,
// so it cannot read as another name or reorder what follows it; its links
// still reach its page.
func TestConsoleShowsBidiControls(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	name := "acme\u202egnp.exe"
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "empty", Tenant: name, Kind: "sum\u2066mary", Cost: 10})
	require.NoError(t, err)
	claimed, err := b.client.Claim(b.ctx, "empty", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = b.client.Fail(b.ctx, claimed[0], errors.New("said \u202bno\u202c"), &queue.FailOpts{Final: true})
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "empty", Tenant: name, Cost: 10})
	require.NoError(t, err)

	for _, path := range []string{
		"/queues/empty", "/queues/empty/chart.svg",
		"/queues/empty/tenants/" + url.PathEscape(name),
		"/jobs/" + strconv.FormatInt(claimed[0].ID, 10),
	} {
		res := b.get(t, path)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", path, res.body)
		require.Contains(t, res.body, `acme\u202egnp.exe`, path)
		for _, c := range []string{"\u202e", "\u2066", "\u202b", "\u202c"} {
			require.NotContains(t, res.body, c, path)
		}
	}
	tenant := b.get(t, "/queues/empty/tenants/"+url.PathEscape(name))
	require.Contains(t, tenant.body, "Tenant acme\\u202egnp.exe <span")
	require.Contains(t, tenant.body, `<td class="name">sum\u2066mary</td>`)
	require.Contains(t, tenant.body, `said \u202bno\u202c`)
	queuePage := b.get(t, "/queues/empty")
	m := regexp.MustCompile(`<a href="([^"]*)">acme\\u202egnp\.exe</a>`).FindStringSubmatch(queuePage.body)
	require.NotNil(t, m, queuePage.body)
	res := b.get(t, m[1])
	require.Equal(t, http.StatusOK, res.status, "%s: %s", m[1], res.body)
}

// A tenant named "." or ".." has links that reach its page: a browser
// resolves a segment of dots against the path before them, written bare or
// as %2E (the WHATWG URL standard's "single-dot" and "double-dot" path
// segments), so the links hold no such segment.
func TestConsoleLinksTenantsNamedWithDots(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, name := range []string{".", ".."} {
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "empty", Tenant: name, Cost: 10})
		require.NoError(t, err)
	}
	page := b.get(t, "/queues/empty")
	require.Equal(t, http.StatusOK, page.status, page.body)
	base, err := url.Parse("http://127.0.0.1:8080/queues/empty")
	require.NoError(t, err)
	for _, name := range []string{".", ".."} {
		m := regexp.MustCompile(`<a href="([^"]*)">` + regexp.QuoteMeta(name) + `</a>`).FindStringSubmatch(page.body)
		require.NotNil(t, m, "no link to tenant %q in:\n%s", name, page.body)
		link, err := base.Parse(m[1])
		require.NoError(t, err)
		for _, seg := range strings.Split(link.EscapedPath(), "/") {
			require.NotContains(t, []string{".", "%2e", "..", ".%2e", "%2e.", "%2e%2e"}, strings.ToLower(seg),
				"tenant %q: a browser resolves the segment %q of %s", name, seg, link.EscapedPath())
		}
		res := b.get(t, link.RequestURI())
		require.Equal(t, http.StatusOK, res.status, "tenant %q: %s: %s", name, link.RequestURI(), res.body)
		require.Contains(t, res.body, "Tenant "+name+" <span")
		require.Contains(t, res.body, `<span data-field="queued-jobs">1</span>`)
	}
}

// A job that runs later, and a retry waiting out its backoff, are scheduled:
// the overview, the queue page and the tenant page count them apart from the
// queued ones.
func TestConsoleCountsJobsThatRunLaterAsScheduled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{
		{Queue: "empty", Tenant: "later", Cost: 10, RunAt: time.Now().Add(time.Hour)},
		{Queue: "empty", Tenant: "later", Cost: 10, Delay: 2 * time.Hour},
		{Queue: "empty", Tenant: "later", Cost: 10},
	})
	require.NoError(t, err)
	claimed, err := b.client.Claim(b.ctx, "empty", &queue.ClaimOpts{Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, b.client.Release(b.ctx, claimed[0], time.Hour)) // a retry, an hour from now

	res := b.get(t, "/")
	require.Equal(t, http.StatusOK, res.status, res.body)
	empty := row(t, res.body, `<tr data-queue="empty">`)
	require.Contains(t, empty, `data-field="queued-jobs">0<`)
	require.Contains(t, empty, `data-field="scheduled">3<`, "two jobs for later and one retry")

	res = b.get(t, "/queues/empty")
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Contains(t, res.body, `<span data-field="scheduled">3</span> scheduled`)

	res = b.get(t, "/queues/empty/tenants/later")
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Contains(t, res.body, "3 scheduled")
}

// The reserve shown is the one the workers keep, 0 included.
func TestConsoleShowsTheReserveItIsGiven(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, c := range []struct {
		reserve float64
		want    string
	}{{0, "reserve (0.0%)"}, {0.25, "reserve (25.0%)"}} {
		h := b.handler(t, b.client, &console.Options{Reserve: c.reserve})
		res := b.do(t, h, http.MethodGet, "/", nil, nil)
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Contains(t, res.body, c.want)
	}
}

// A path that cannot name a queue or a tenant (not UTF-8, or with a NUL)
// is a bad request, not a server error.
func TestConsoleRefusesPathsNoNameCanHave(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, p := range []string{"/queues/docs/tenants/a%00b", "/queues/docs/tenants/%FF%FE", "/queues/a%00b"} {
		require.Equal(t, http.StatusBadRequest, b.get(t, p).status, p)
	}
}

// A database the console cannot read (not migrated, migrated by an older
// release, out of reach) is a 503 that says what to do, on every page; the
// database's and the driver's own words, which name hosts, users and
// tables, go to the log only.
func TestConsoleSaysWhyItCannotReadTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	older := pgtest.EmptyURL(t)
	db := stdlib.OpenDB(*pgxConfig(t, older))
	defer db.Close()
	_, err := migrations.UpTo(ctx, db, 5)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, url, want string
	}{
		{"not migrated", pgtest.EmptyURL(t), "run &#39;batchq migrate up&#39;"},
		{"an older schema", older, "run &#39;batchq migrate up&#39;"},
		{"out of reach", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "the console cannot reach its database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := queue.NewClient(pgtest.Connect(t, tc.url), queue.Config{})
			require.NoError(t, err)
			var log bytes.Buffer
			h, err := console.Handler(client, &console.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
			require.NoError(t, err)
			for _, p := range []string{"/", "/queues/docs", "/queues/docs/chart.svg", "/queues/docs/tenants/acme", "/jobs/1"} {
				r := httptest.NewRequest(http.MethodGet, p, nil)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				require.Equal(t, http.StatusServiceUnavailable, w.Code, "%s: %s", p, w.Body)
				require.Contains(t, w.Body.String(), tc.want, p)
				for _, raw := range []string{"SQLSTATE", "does not exist", "dial", "nobody", "batchq: "} {
					require.NotContains(t, w.Body.String(), raw, p)
				}
			}
			require.Regexp(t, `SQLSTATE|failed to connect`, log.String(), "the log has the database's error")
		})
	}
}

// pgxConfig parses a database URL.
func pgxConfig(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return cfg
}

// Bound to loopback, the console answers only to a loopback Host: a page
// whose name was re-pointed at 127.0.0.1 cannot read it.
func TestConsoleLoopbackOnlyChecksTheHost(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := console.LoopbackOnly(b.h)
	for host, want := range map[string]int{
		"127.0.0.1:8080":             http.StatusOK,
		"localhost:8080":             http.StatusOK,
		"LOCALHOST":                  http.StatusOK,
		"[::1]:8080":                 http.StatusOK,
		"127.0.0.2":                  http.StatusOK,
		"attacker.example:8080":      http.StatusMisdirectedRequest,
		"localhost.attacker.example": http.StatusMisdirectedRequest,
		"10.0.0.1:8080":              http.StatusMisdirectedRequest,
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, want, w.Code, host)
	}
}

// One job is counted in the singular, on the queue's page and the tenant's,
// and on the cancel button.
func TestConsoleCountsOneJobInTheSingular(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "solo"}))
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "solo", Tenant: "one", Cost: 5})
	require.NoError(t, err)
	session, _ := b.signIn(t, b.h)
	page := b.get(t, "/queues/solo", session)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Contains(t, page.body, `<span data-field="queued-jobs">1</span> job queued`)
	page = b.get(t, "/queues/solo/tenants/one", session)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Contains(t, page.body, `<span data-field="queued-jobs">1</span> job queued`)
	require.Contains(t, page.body, `>cancel 1 job</button>`)
}
