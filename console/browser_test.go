package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/internal/demo"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// chromium finds the browser the browser test drives: $BATCHQ_CHROMIUM, or
// chromium, chromium-browser or google-chrome on PATH. Without one the test
// fails: it is part of `make test`, and a missing browser is a machine to
// fix, not a check to skip.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BATCHQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the console's browser test needs Chromium, and none was found on PATH: " +
		"install it (Debian/Ubuntu: apt-get install chromium; .ci/run does) or set BATCHQ_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// TestConsoleInABrowser plays a short run of the demo's story, serves the
// console over its database, and drives headless Chromium through it: the
// overview and the queue page render with their tenant rows and share
// chart, a number changes on its own when jobs arrive, a queue is paused and
// resumed after signing in with the token, an action without the token is
// refused, and a tenant's 256-byte name wraps rather than push the numbers
// out of the window. With UPDATE_SCREENSHOT=1 it writes the queue page to
// docs/console-queue.png.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	browser := chromium(t)
	ctx := context.Background()

	// A short run of the demo's story: the import, the steady tenants, the
	// small ones, the deadlines, the quota.
	name := fmt.Sprintf("batchq_console_test_%d", rand.Uint64())
	t.Cleanup(func() {
		if err := demo.DropDatabase(context.Background(), server, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	var out bytes.Buffer
	_, err := demo.Run(ctx, demo.Config{
		DatabaseURL: server, DatabaseName: name, Duration: 12 * time.Second, Speed: 4,
		ChartPath: filepath.Join(t.TempDir(), "shares.svg"), Out: &out, Seed: 5,
	})
	require.NoError(t, err, out.String())
	u, err := url.Parse(server)
	require.NoError(t, err)
	u.Path = "/" + name
	client, err := queue.NewClient(pgtest.Connect(t, u.String()), queue.Config{})
	require.NoError(t, err)
	h, err := console.Handler(client, &console.Options{Token: testToken, Refresh: 300 * time.Millisecond, TopTenants: 8})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(1280, 1400),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// The first run starts the browser, under no timeout of its own: a
	// timeout on it would stop the browser. Each step after has one.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("about:blank")), "start %s", browser)
	step := func() context.Context {
		c, cancel := context.WithTimeout(bctx, 30*time.Second)
		t.Cleanup(cancel)
		return c
	}
	do := func(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(step(), steps...), what)
	}
	// text reads an element's text in one evaluation: the live refresh
	// replaces the elements under #live, so a node found in one call may be
	// gone by the next.
	text := func(t *testing.T, sel string) string {
		t.Helper()
		q, err := json.Marshal(sel)
		require.NoError(t, err)
		s, err := chromedp.Run(step(), chromedp.Evaluate[string](`document.querySelector(`+string(q)+`).textContent.trim()`))
		require.NoError(t, err, sel)
		return s
	}
	paused := func() bool {
		q, err := client.Queue(ctx, "summaries")
		require.NoError(t, err)
		return q.PausedAt != nil
	}

	t.Run("the overview lists the demo's queue and quota key", func(t *testing.T) {
		do(t, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`tr[data-queue="summaries"]`))
		require.NotEqual(t, "0", text(t, `tr[data-queue="summaries"] [data-field="queued-tokens"]`), "the story leaves a backlog")
		require.Equal(t, "sim/chat-model", text(t, `#quota tbody tr td`))
	})

	t.Run("the queue page has tenant rows and the share chart", func(t *testing.T) {
		do(t, "queue page", chromedp.Navigate(srv.URL+"/queues/summaries?window=1m"), chromedp.WaitVisible(`#tenants tr.tenant`))
		tenants, err := chromedp.Run(step(), chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll("#tenants tr.tenant")).map(r => r.dataset.tenant)`))
		require.NoError(t, err)
		require.Subset(t, tenants, []string{"acme", "globex", "initech"})
		width, err := chromedp.Run(step(), chromedp.Poll[int](
			`document.getElementById("share-chart").complete && document.getElementById("share-chart").naturalWidth`,
			chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err)
		require.Greater(t, width, 300, "the chart's SVG loaded")
		svg, err := chromedp.Run(step(), chromedp.Evaluate[string](
			`fetch(document.getElementById("share-chart").src).then(r => r.text())`, chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		require.Contains(t, svg, "<svg")
		require.Contains(t, svg, "fair share of")

		png, err := chromedp.Run(step(), chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.Greater(t, len(png), 10_000)
		if os.Getenv("UPDATE_SCREENSHOT") == "1" {
			require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "console-queue.png"), png, 0o644))
		}
	})

	t.Run("a number changes on its own", func(t *testing.T) {
		_, err := chromedp.Run(step(), chromedp.Evaluate[bool](`window.notReloaded = true`))
		require.NoError(t, err)
		before := text(t, `#summary [data-field="queued-jobs"]`)
		var jobs []queue.NewJob
		for range 25 {
			jobs = append(jobs, queue.NewJob{Queue: "summaries", Tenant: "newcomer", Cost: 50})
		}
		_, err = client.EnqueueMany(ctx, jobs)
		require.NoError(t, err)
		_, err = chromedp.Run(step(), chromedp.Poll[bool](
			fmt.Sprintf(`document.querySelector('#summary [data-field="queued-jobs"]').textContent !== %q`, before),
			chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err, "the number did not change")
		after := text(t, `#summary [data-field="queued-jobs"]`)
		notReloaded, err := chromedp.Run(step(), chromedp.Evaluate[bool](`window.notReloaded === true`))
		require.NoError(t, err)
		require.True(t, notReloaded, "the page was not reloaded")
		require.Equal(t, num(t, before)+25, num(t, after))
	})

	t.Run("an action without the token is refused", func(t *testing.T) {
		status, err := chromedp.Run(step(), chromedp.Evaluate[int](
			`fetch("/queues/summaries/pause", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "csrf="}).then(r => r.status)`,
			chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, status)
		buttons, err := chromedp.Run(step(), chromedp.Evaluate[int](`document.querySelectorAll("#pause, #resume").length`))
		require.NoError(t, err)
		require.Zero(t, buttons, "no action is offered before signing in")
		require.False(t, paused())
	})

	t.Run("pause and resume with the token", func(t *testing.T) {
		do(t, "sign in",
			chromedp.Navigate(srv.URL+"/login?next=/queues/summaries"),
			chromedp.WaitVisible(`#token`),
			chromedp.SendKeys(`#token`, testToken),
			chromedp.Submit(`#token`),
			chromedp.WaitVisible(`#pause`))
		do(t, "pause", chromedp.Click(`#pause`), chromedp.WaitVisible(`#resume`))
		require.Contains(t, text(t, `#flash`), "paused queue summaries")
		require.True(t, paused())
		require.Contains(t, text(t, `#summary [data-field="state"]`), "paused since")
		do(t, "resume", chromedp.Click(`#resume`), chromedp.WaitVisible(`#pause`))
		require.Contains(t, text(t, `#flash`), "resumed queue summaries")
		require.False(t, paused())
	})

	t.Run("a long name wraps and the numbers stay in the window", func(t *testing.T) {
		// The longest name a tenant may have, with nowhere to break it, and
		// the most tokens, so that it has a row on the queue page.
		long := strings.Repeat("w", queue.MaxNameBytes)
		e, err := client.Enqueue(ctx, queue.NewJob{Queue: "summaries", Tenant: long, Kind: strings.Repeat("k", queue.MaxNameBytes), Cost: queue.MaxCost})
		require.NoError(t, err)
		row := `#tenants tr.tenant[data-tenant="` + long + `"]`
		type layout struct {
			Viewport, Page, Table, LastCell float64
		}
		measure := func(t *testing.T, table, lastCell string) layout {
			t.Helper()
			q, err := json.Marshal([]string{table, lastCell})
			require.NoError(t, err)
			l, err := chromedp.Run(step(), chromedp.Evaluate[layout](`(([table, cell]) => ({
				Viewport: document.documentElement.clientWidth,
				Page: document.documentElement.scrollWidth,
				Table: document.querySelector(table).getBoundingClientRect().right,
				LastCell: document.querySelector(cell).getBoundingClientRect().right,
			}))(`+string(q)+`)`))
			require.NoError(t, err)
			return l
		}
		within := func(t *testing.T, l layout) {
			t.Helper()
			require.LessOrEqual(t, l.Page, l.Viewport, "the page scrolls sideways: %+v", l)
			require.LessOrEqual(t, l.Table, l.Viewport, "the table is wider than the window: %+v", l)
			require.LessOrEqual(t, l.LastCell, l.Viewport, "the row's last number is off-screen: %+v", l)
		}

		do(t, "queue page", chromedp.Navigate(srv.URL+"/queues/summaries?window=1m"), chromedp.WaitVisible(row))
		within(t, measure(t, "#tenants", row+" td:last-child"))
		require.Equal(t, long, text(t, row+" td:first-child"), "the whole name is on the page")

		do(t, "tenant page", chromedp.Navigate(srv.URL+"/queues/summaries/tenants/"+long), chromedp.WaitVisible(`#backlog`))
		within(t, measure(t, "#counts", "#counts td:last-child"))

		do(t, "job page", chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", srv.URL, e.ID)), chromedp.WaitVisible(`#record`))
		within(t, measure(t, "#record", "#record tr:nth-child(2) td"))
	})
}

// num reads a number the console wrote with thousands separators.
func num(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	_, err := fmt.Sscan(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), &n)
	require.NoError(t, err, "%q", s)
	return n
}
