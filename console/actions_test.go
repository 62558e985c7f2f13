package console_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/queue"
)

func TestConsoleActionsNeedTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // read-only
	acme := b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'acme'`)
	for _, path := range []string{"/queues/docs/pause", "/queues/docs/resume", "/queues/docs/tenants/acme/settings",
		"/queues/docs/tenants/acme/cancel", "/jobs/" + strconv.FormatInt(b.discarded, 10) + "/retry"} {
		res := b.do(t, b.h, http.MethodPost, path, url.Values{"weight": {"2"}, "expect": {"100"}}, nil)
		require.Equal(t, http.StatusForbidden, res.status, path)
		require.Contains(t, res.body, "the console is read-only: start it with a token", path)
	}
	require.False(t, b.paused(t, "docs"))
	require.Equal(t, acme, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'acme'`), "nothing cancelled")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queue_tenants`), "no setting changed")

	require.Equal(t, http.StatusNotFound, b.get(t, "/login").status, "nothing to sign in to")
	res := b.do(t, b.h, http.MethodPost, "/login", url.Values{"token": {testToken}}, nil)
	require.Equal(t, http.StatusForbidden, res.status)
	page := b.get(t, "/queues/docs")
	require.NotContains(t, page.body, `id="pause"`, "a read-only console shows no action")
}

// A form past the limit, an action's or the sign-in's, is refused as too
// large, with the limit, and changes nothing.
func TestConsoleRefusesAFormTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{"reason": {strings.Repeat("a", 70<<10)}},
		http.Header{"Authorization": {"Bearer " + testToken}})
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status, res.body)
	require.Contains(t, res.body, "the form is larger than 64 KiB, the most the console takes")
	require.NotContains(t, res.body, "http: ")
	require.False(t, b.paused(t, "docs"))

	// Signing in too: a token cut off by the limit is not a wrong token.
	res = b.do(t, b.h, http.MethodPost, "/login", url.Values{"token": {testToken}, "next": {"/" + strings.Repeat("a", 70<<10)}}, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status, res.body)
	require.Contains(t, res.body, "the form is larger than 64 KiB, the most the console takes")
	require.Empty(t, res.header.Values("Set-Cookie"), "no session")

	// A multipart form is bound alike, and a body that is no form at all.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("token", testToken))
	require.NoError(t, mw.WriteField("pad", strings.Repeat("a", 70<<10)))
	require.NoError(t, mw.Close())
	req := httptest.NewRequest(http.MethodPost, "/login", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	require.Empty(t, rec.Result().Header.Values("Set-Cookie"), "no session")
	req = httptest.NewRequest(http.MethodPost, "/queues/docs/pause", strings.NewReader(strings.Repeat("a", 70<<10)))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec = httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	require.False(t, b.paused(t, "docs"))
}

func TestConsolePauseAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})

	t.Run("refused without a session", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{}, nil)
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Contains(t, res.body, "sign in with the console&#39;s token to act")
		require.False(t, b.paused(t, "docs"))
	})
	t.Run("a wrong token does not sign in", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/login", url.Values{"token": {testToken + "x"}}, nil)
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Empty(t, res.header.Values("Set-Cookie"))
	})
	session, csrf := b.signIn(t, b.h)
	t.Run("refused with a bad CSRF token", func(t *testing.T) {
		other := "0" + csrf[1:] // differs from csrf in its first digit
		if csrf[0] == '0' {
			other = "1" + csrf[1:]
		}
		for _, token := range []string{"", other, csrf + "0"} {
			res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{"csrf": {token}}, nil, session)
			require.Equal(t, http.StatusForbidden, res.status)
			require.Contains(t, res.body, "CSRF token is missing or wrong")
		}
		require.False(t, b.paused(t, "docs"))
	})
	t.Run("refused from another site", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{"csrf": {csrf}},
			http.Header{"Origin": {"https://evil.example"}}, session)
		require.Equal(t, http.StatusForbidden, res.status)
		require.False(t, b.paused(t, "docs"))
	})
	t.Run("a forged session cookie is no session", func(t *testing.T) {
		forged := &http.Cookie{Name: session.Name, Value: "0011.2233"}
		res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{"csrf": {csrf}}, nil, forged)
		require.Equal(t, http.StatusUnauthorized, res.status)
	})
	t.Run("pause and resume with the session and its CSRF token", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{"csrf": {csrf}}, nil, session)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.Equal(t, "/queues/docs", res.header.Get("Location"))
		require.True(t, b.paused(t, "docs"))
		var flash *http.Cookie
		for _, c := range (&http.Response{Header: res.header}).Cookies() {
			if c.Name == "batchq_flash" {
				flash = c
			}
		}
		require.NotNil(t, flash)
		page := b.get(t, "/queues/docs", session, flash)
		require.Contains(t, page.body, "paused queue docs: its workers claim nothing until it is resumed")
		require.Contains(t, page.body, `id="resume"`)

		again := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{"csrf": {csrf}}, nil, session)
		require.Equal(t, http.StatusSeeOther, again.status)

		res = b.do(t, b.h, http.MethodPost, "/queues/docs/resume", url.Values{"csrf": {csrf}}, nil, session)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.False(t, b.paused(t, "docs"))
	})
	t.Run("a script acts with the bearer token", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{}, http.Header{"Authorization": {"Bearer " + testToken}})
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.True(t, b.paused(t, "docs"))
		res = b.do(t, b.h, http.MethodPost, "/queues/docs/resume", url.Values{}, http.Header{"Authorization": {"Bearer nope-nope-nope-nope"}})
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.True(t, b.paused(t, "docs"))
		res = b.do(t, b.h, http.MethodPost, "/queues/docs/resume", url.Values{}, http.Header{"Authorization": {"Basic " + testToken}})
		require.Equal(t, http.StatusUnauthorized, res.status, "another scheme is no bearer token")
		require.True(t, b.paused(t, "docs"))
	})
	t.Run("the bearer scheme is case-insensitive", func(t *testing.T) {
		// RFC 9110, section 11.1.
		for _, scheme := range []string{"bearer", "BEARER", "bEaReR"} {
			res := b.do(t, b.h, http.MethodPost, "/queues/docs/resume", url.Values{}, http.Header{"Authorization": {scheme + " " + testToken}})
			require.Equal(t, http.StatusSeeOther, res.status, "%s: %s", scheme, res.body)
			require.False(t, b.paused(t, "docs"), scheme)
			res = b.do(t, b.h, http.MethodPost, "/queues/docs/pause", url.Values{}, http.Header{"Authorization": {scheme + "  " + testToken}})
			require.Equal(t, http.StatusSeeOther, res.status, "%s and two spaces: %s", scheme, res.body)
			require.True(t, b.paused(t, "docs"), scheme)
		}
	})
	t.Run("an unknown queue", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/queues/nope/pause", url.Values{"csrf": {csrf}}, nil, session)
		require.Equal(t, http.StatusNotFound, res.status)
	})
	t.Run("sign out ends the session's actions", func(t *testing.T) {
		res := b.do(t, b.h, http.MethodPost, "/logout", url.Values{}, nil, session)
		require.Equal(t, http.StatusSeeOther, res.status)
		require.Contains(t, res.header.Get("Set-Cookie"), "Max-Age=0")
	})
}

func TestConsoleTenantSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	session, csrf := b.signIn(t, b.h)
	post := func(form url.Values) response {
		form.Set("csrf", csrf)
		return b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/globex/settings", form, nil, session)
	}

	res := post(url.Values{"weight": {"2.5"}, "max_queued": {"40"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, "/queues/docs/tenants/globex", res.header.Get("Location"))
	qt, err := b.client.QueueTenants(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []queue.QueueTenant{{Queue: "docs", Tenant: "globex", Weight: 2.5, MaxQueued: 40}}, qt)

	res = post(url.Values{"weight": {"4"}, "scope": {"all"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	tn, _, err := b.client.TenantSettings(b.ctx, "globex")
	require.NoError(t, err)
	require.Equal(t, 4.0, tn.Weight)

	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"weight": {"heavy"}}, "weight &#34;heavy&#34;: must be a decimal number in 0.001..1000000, such as 2, 0.5 or 1e-3"},
		// strconv.ParseFloat reads these, as Go writes floats; people do not.
		{url.Values{"weight": {"0x1p1"}}, "weight &#34;0x1p1&#34;: must be a decimal number in 0.001..1000000"},
		{url.Values{"weight": {"0x10"}}, "weight &#34;0x10&#34;: must be a decimal number"},
		{url.Values{"weight": {"1_0"}}, "weight &#34;1_0&#34;: must be a decimal number"},
		{url.Values{"weight": {"Inf"}}, "weight &#34;Inf&#34;: must be a decimal number"},
		{url.Values{"weight": {"+infinity"}}, "weight &#34;&#43;infinity&#34;: must be a decimal number"},
		{url.Values{"weight": {"NaN"}}, "weight &#34;NaN&#34;: must be a decimal number"},
		{url.Values{"weight": {"1e400"}}, "weight &#34;1e400&#34;: must be a decimal number in 0.001..1000000"},
		// Not 0, which for the queue's scope would drop the tenant's weight there.
		{url.Values{"weight": {"1e-400"}, "scope": {"queue"}}, "weight &#34;1e-400&#34;: must be a decimal number in 0.001..1000000"},
		{url.Values{"max_queued": {"1.5"}}, "max_queued &#34;1.5&#34;: must be a whole number"},
		{url.Values{}, "weight and max_queued are both empty"},
		{url.Values{"weight": {"1e9"}}, "weight"},
		{url.Values{"max_queued": {"-3"}}, "max_queued"},
		{url.Values{"weight": {"0"}, "scope": {"all"}}, "weight 0: a tenant&#39;s weight for every queue must be in"},
		{url.Values{"weight": {"2"}, "scope": {"galaxy"}}, "scope &#34;galaxy&#34;: must be queue or all"},
	} {
		res := post(tc.form)
		require.Equal(t, http.StatusBadRequest, res.status, "%v: %s", tc.form, res.body)
		require.Contains(t, res.body, tc.want, "%v", tc.form)
	}
	qt, err = b.client.QueueTenants(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []queue.QueueTenant{{Queue: "docs", Tenant: "globex", Weight: 2.5, MaxQueued: 40}}, qt, "refused changes change nothing")

	page := b.get(t, "/queues/docs/tenants/globex", session)
	require.Contains(t, page.body, "weight <strong>2.5</strong> (its own in this queue; 4 in every queue)")
	require.Contains(t, page.body, "bound <strong>40</strong>")

	// A decimal number may have an exponent, as the CLI's --weight may.
	res = post(url.Values{"weight": {"1.5e1"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	qt, err = b.client.QueueTenants(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 15.0, qt[0].Weight)
}

func TestConsoleCancelTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	session, csrf := b.signIn(t, b.h)
	asOfOf := func(body string) string {
		m := regexp.MustCompile(`name="asof" value="([^"]+)"`).FindStringSubmatch(body)
		require.Len(t, m, 2, "the form says when the page counted")
		return m[1]
	}

	page := b.get(t, "/queues/docs/tenants/globex", session)
	require.Contains(t, page.body, `name="expect" value="5"`, "the dry run counts globex's 5 unfinished jobs")
	require.Contains(t, page.body, "dry run: 4 queued (400 tokens) and 0 scheduled would be cancelled, 1 running asked to stop")

	// More jobs arrive after the page was shown: nothing is cancelled.
	late, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "docs", Tenant: "globex", Cost: 5})
	require.NoError(t, err)
	form := url.Values{"csrf": {csrf}, "expect": {"5"}, "asof": {asOfOf(page.body)}, "reason": {"tenant left"}}
	res := b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/globex/cancel", form, nil, session)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, int64(6), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'globex'`))

	// One of the counted jobs finishes as the late one waits: the count
	// holds again, but the job the page never showed is not cancelled.
	var first int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT min(id) FROM batchq.jobs WHERE tenant = 'globex' AND state = 'queued'`).Scan(&first))
	require.NoError(t, b.client.Cancel(b.ctx, first, "gone"))
	res = b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/globex/cancel", form, nil, session)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE tenant = 'globex' AND outcome = 'cancelled' AND error = 'tenant left'`))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'globex' AND cancel_requested_at IS NOT NULL`),
		"the running job is asked to stop")
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'queued'`, late.ID), "the job enqueued after the page stays")
	require.Equal(t, int64(8), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant <> 'globex'`), "other tenants keep theirs")

	// A page shown again counts it, and its form takes it.
	page = b.get(t, "/queues/docs/tenants/globex", session)
	require.Contains(t, page.body, `name="expect" value="2"`)
	form.Set("expect", "2")
	form.Set("asof", asOfOf(page.body))
	res = b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/globex/cancel", form, nil, session)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE tenant = 'globex' AND outcome = 'cancelled' AND error = 'tenant left'`))

	// A tenant the queue does not know is a 404, as its page is.
	res = b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/nobody/cancel", url.Values{"csrf": {csrf}, "expect": {"5"}}, nil, session)
	require.Equal(t, http.StatusNotFound, res.status, res.body)
	require.Contains(t, res.body, "no tenant &#34;nobody&#34; in queue &#34;docs&#34;")

	res = b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/globex/cancel", url.Values{"csrf": {csrf}, "expect": {"many"}}, nil, session)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "expect &#34;many&#34;: must be the number of jobs")
	res = b.do(t, b.h, http.MethodPost, "/queues/docs/tenants/globex/cancel", url.Values{"csrf": {csrf}, "expect": {"1"}, "asof": {"yesterday"}}, nil, session)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "asof &#34;yesterday&#34;: must be the time the page counted the jobs")
}

func TestConsoleRetryJob(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	session, csrf := b.signIn(t, b.h)
	path := "/jobs/" + strconv.FormatInt(b.discarded, 10)
	page := b.get(t, path, session)
	require.Contains(t, page.body, "resubmit a copy")

	res := b.do(t, b.h, http.MethodPost, path+"/retry", url.Values{"csrf": {csrf}}, nil, session)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	copyID := b.scalar(t, `SELECT id FROM batchq.jobs WHERE unique_key = $1`, queue.ResubmitKeyPrefix+strconv.FormatInt(b.discarded, 10))
	require.Equal(t, "/jobs/"+strconv.FormatInt(copyID, 10), res.header.Get("Location"))

	// A second retry finds the copy rather than making another.
	res = b.do(t, b.h, http.MethodPost, path+"/retry", url.Values{"csrf": {csrf}}, nil, session)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE unique_key LIKE 'batchq:resubmit-of:%'`))

	// A job that succeeded is not retried.
	res = b.do(t, b.h, http.MethodPost, "/jobs/"+strconv.FormatInt(b.done, 10)+"/retry", url.Values{"csrf": {csrf}}, nil, session)
	require.Equal(t, http.StatusConflict, res.status)
	require.Contains(t, res.body, "succeeded: only failed, discarded, expired or cancelled jobs are retried")

	// Nor one still running: it has nothing to retry yet, and it exists.
	running := b.scalar(t, `SELECT min(id) FROM batchq.jobs WHERE state = 'running'`)
	res = b.do(t, b.h, http.MethodPost, "/jobs/"+strconv.FormatInt(running, 10)+"/retry", url.Values{"csrf": {csrf}}, nil, session)
	require.Equal(t, http.StatusConflict, res.status, res.body)
	require.Contains(t, res.body, "is running: only a job waiting to retry or scheduled, or one that failed")
}

// Every action refuses a session whose form lacks the CSRF token or carries
// a wrong one, and a request without a session, and changes nothing.
func TestConsoleEveryActionChecksTheSessionAndCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	session, csrf := b.signIn(t, b.h)
	state := func() []int64 {
		return []int64{
			b.scalar(t, `SELECT count(*) FROM batchq.queues WHERE paused_at IS NOT NULL`),
			b.scalar(t, `SELECT count(*) FROM batchq.queue_tenants`),
			b.scalar(t, `SELECT count(*) FROM batchq.tenants`),
			b.scalar(t, `SELECT count(*) FROM batchq.jobs`),
			b.scalar(t, `SELECT count(*) FROM batchq.outcomes`),
		}
	}
	// A token of the right form that differs in its first digit.
	other := "0" + csrf[1:]
	if csrf[0] == '0' {
		other = "1" + csrf[1:]
	}
	before := state()
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/queues/docs/pause", url.Values{}},
		{"/queues/docs/resume", url.Values{}},
		{"/queues/docs/tenants/acme/settings", url.Values{"weight": {"7"}, "scope": {"all"}}},
		{"/queues/docs/tenants/acme/cancel", url.Values{"expect": {"100"}}},
		{"/jobs/" + strconv.FormatInt(b.discarded, 10) + "/retry", url.Values{}},
	} {
		for _, bad := range []string{"", other, csrf[:len(csrf)-2]} {
			form := url.Values{}
			for k, v := range tc.form {
				form[k] = v
			}
			if bad != "" {
				form.Set("csrf", bad)
			}
			res := b.do(t, b.h, http.MethodPost, tc.path, form, nil, session)
			require.Equal(t, http.StatusForbidden, res.status, "%s with CSRF %q: %s", tc.path, bad, res.body)
			require.Contains(t, res.body, "CSRF token is missing or wrong", tc.path)
		}
		form := url.Values{"csrf": {csrf}}
		for k, v := range tc.form {
			form[k] = v
		}
		res := b.do(t, b.h, http.MethodPost, tc.path, form, nil)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s without a session: %s", tc.path, res.body)
	}
	require.Equal(t, before, state(), "a refused action changed something")
}

// Signing in returns to a page of the console, never to another host,
// however the path is written.
func TestConsoleSignInReturnsOnlyToItsOwnPages(t *testing.T) {
	t.Parallel()
	b := setup(t, &console.Options{Token: testToken})
	for next, want := range map[string]string{
		"/queues/docs":         "/queues/docs",
		"//evil.example":       "/",
		"/\\evil.example":      "/",
		"/\t/evil.example":     "/",
		"/\n/evil.example":     "/",
		"/ /evil.example":      "/",
		"https://evil.example": "/",
		"":                     "/",
	} {
		res := b.do(t, b.h, http.MethodPost, "/login", url.Values{"token": {testToken}, "next": {next}}, nil)
		require.Equal(t, http.StatusSeeOther, res.status, "next %q", next)
		require.Equal(t, want, res.header.Get("Location"), "next %q", next)
	}
}
