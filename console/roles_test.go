package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/migrations"
	"github.com/batchq/batchq/queue"
)

// TestConsoleUnderLeastPrivilegeRoles runs the console as batchq's app role
// (reports only), as its operator role and as the schema's owner: every
// page works; payloads and results show only to the operator and the
// owner; a page offers only the forms of the actions the role may take, and
// says which it may not; an action the role may not take is refused with
// the database's reason, token or not, and changes nothing.
func TestConsoleUnderLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	app, operator := grantRoles(t, b)

	t.Run("the app role reads every page but payloads and results, and takes no action", func(t *testing.T) {
		h := b.handler(t, roleClient(t, b, app), &console.Options{Token: testToken})
		for _, path := range []string{"/", "/queues/docs", "/queues/docs/chart.svg", "/queues/docs/tenants/acme"} {
			res := b.do(t, h, http.MethodGet, path, nil, nil)
			require.Equal(t, http.StatusOK, res.status, "%s: %s", path, res.body)
		}
		job := b.do(t, h, http.MethodGet, "/jobs/"+strconv.FormatInt(b.done, 10), nil, nil)
		require.Equal(t, http.StatusOK, job.status, job.body)
		require.Contains(t, job.body, `data-field="state">succeeded<`)
		require.NotContains(t, job.body, "secret-result")
		require.Contains(t, job.body, "the console&#39;s database role may not read payloads and results")
		discarded := b.do(t, h, http.MethodGet, "/jobs/"+strconv.FormatInt(b.discarded, 10), nil, nil)
		require.NotContains(t, discarded.body, "secret-payload")
		require.Contains(t, discarded.body, "provider said: malformed request", "errors are in the reports")

		// The app role's pages offer no form to take a CSRF token from: a
		// session signed in on the owner's console serves, as a session and
		// its CSRF token are bound to the console's token alone.
		session, csrf := b.signIn(t, b.handler(t, b.client, &console.Options{Token: testToken}))
		forms(t, b, h, session, map[string]bool{"pause": false, "settings": false, "cancel": false, "retry": false})
		for _, tc := range []struct{ path, field, value string }{
			{"/queues/docs/pause", "", ""},
			{"/queues/docs/tenants/acme/settings", "weight", "9"},
			{"/queues/docs/tenants/acme/cancel", "expect", "100"},
			{"/jobs/" + strconv.FormatInt(b.discarded, 10) + "/retry", "", ""},
		} {
			form := url.Values{"csrf": {csrf}}
			if tc.field != "" {
				form.Set(tc.field, tc.value)
			}
			res := b.do(t, h, http.MethodPost, tc.path, form, nil, session)
			require.Equal(t, http.StatusForbidden, res.status, "%s: %s", tc.path, res.body)
			require.Contains(t, res.body, "refused by the database: the console&#39;s database role may not do this", tc.path)
		}
		require.False(t, b.paused(t, "docs"))
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queue_tenants`))
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'cancelled'`))
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE unique_key IS NOT NULL`))
		page := b.do(t, h, http.MethodGet, "/queues/docs/tenants/acme", nil, nil, session)
		require.Contains(t, page.body, "Cancelling needs the operator role")
	})

	t.Run("the operator role sees payloads, pauses and cancels, but changes no setting", func(t *testing.T) {
		h := b.handler(t, roleClient(t, b, operator), &console.Options{Token: testToken})
		job := b.do(t, h, http.MethodGet, "/jobs/"+strconv.FormatInt(b.done, 10), nil, nil)
		require.Contains(t, job.body, "secret-result")

		session, csrf := b.signIn(t, h)
		forms(t, b, h, session, map[string]bool{"pause": true, "settings": false, "cancel": true, "retry": false})
		res := b.do(t, h, http.MethodPost, "/queues/docs/pause", url.Values{"csrf": {csrf}}, nil, session)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.True(t, b.paused(t, "docs"))
		res = b.do(t, h, http.MethodPost, "/queues/docs/resume", url.Values{"csrf": {csrf}}, nil, session)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)

		res = b.do(t, h, http.MethodPost, "/queues/docs/tenants/acme/settings", url.Values{"csrf": {csrf}, "weight": {"9"}}, nil, session)
		require.Equal(t, http.StatusForbidden, res.status, res.body)
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queue_tenants`))

		page := b.do(t, h, http.MethodGet, "/queues/docs/tenants/initech", nil, nil, session)
		require.Contains(t, page.body, `name="expect" value="4"`)
		res = b.do(t, h, http.MethodPost, "/queues/docs/tenants/initech/cancel", url.Values{"csrf": {csrf}, "expect": {"4"}}, nil, session)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE tenant = 'initech' AND outcome = 'cancelled'`))
	})

	t.Run("the schema's owner is offered every action", func(t *testing.T) {
		h := b.handler(t, b.client, &console.Options{Token: testToken})
		session, _ := b.signIn(t, h)
		forms(t, b, h, session, map[string]bool{"pause": true, "settings": true, "cancel": true, "retry": true})
	})

	t.Run("the app role sees the run-at of a job finished while it waited for it", func(t *testing.T) {
		h := b.handler(t, roleClient(t, b, app), &console.Options{Token: testToken})
		// As the owner's page shows it.
		runAt := time.Now().Add(48 * time.Hour).Truncate(time.Second)
		res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "docs", Tenant: "acme", Cost: 1, RunAt: runAt})
		require.NoError(t, err)
		require.NoError(t, b.client.Cancel(b.ctx, res.ID, "not needed"))
		scheduled := b.do(t, h, http.MethodGet, "/jobs/"+strconv.FormatInt(res.ID, 10), nil, nil)
		require.Equal(t, http.StatusOK, scheduled.status, scheduled.body)
		require.Contains(t, scheduled.body, `data-field="run-after">`+runAt.UTC().Format("2006-01-02 15:04:05Z"))
	})
}

// forms checks which action forms a signed-in browser is offered on the
// pages that have them: a form where the role may take the action, else a
// line that says it may not.
func forms(t *testing.T, b *testBundle, h http.Handler, session *http.Cookie, want map[string]bool) {
	t.Helper()
	pages := map[string]string{
		"pause":    "/queues/docs",
		"settings": "/queues/docs/tenants/acme",
		"cancel":   "/queues/docs/tenants/acme",
		"retry":    "/jobs/" + strconv.FormatInt(b.discarded, 10),
	}
	form := map[string]string{"pause": `id="pause"`, "settings": `id="settings-form"`, "cancel": `id="cancel-form"`, "retry": `id="retry-form"`}
	for action, may := range want {
		page := b.do(t, h, http.MethodGet, pages[action], nil, nil, session)
		require.Equal(t, http.StatusOK, page.status, page.body)
		if may {
			require.Contains(t, page.body, form[action], action)
			require.NotContains(t, page.body, `id="no-`+action+`"`, action)
		} else {
			require.NotContains(t, page.body, form[action], action)
			require.Contains(t, page.body, `id="no-`+action+`"`, action)
			require.Contains(t, page.body, "the console's database role may not", action)
		}
	}
}

// grantRoles creates batchq's app and operator roles (and a worker role,
// which the grants need) for this test, with passwords, and drops them at
// its end.
func grantRoles(t *testing.T, b *testBundle) (app, operator string) {
	t.Helper()
	suffix := randomHex(t)
	app, worker, operator := "batchq_ctest_app_"+suffix, "batchq_ctest_worker_"+suffix, "batchq_ctest_op_"+suffix
	super := superURL(t, b.url)
	sql, err := migrations.Grants(app, worker, operator)
	require.NoError(t, err)
	conn, err := pgx.Connect(b.ctx, super)
	require.NoError(t, err)
	defer conn.Close(b.ctx)
	_, err = conn.Exec(b.ctx, sql)
	require.NoError(t, err)
	for _, r := range []string{app, worker, operator} {
		_, err := conn.Exec(b.ctx, fmt.Sprintf(`ALTER ROLE %s PASSWORD '%s'`, pgx.Identifier{r}.Sanitize(), "pw-"+r))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, super)
		require.NoError(t, err)
		defer conn.Close(ctx)
		for _, r := range []string{app, worker, operator} {
			ident := pgx.Identifier{r}.Sanitize()
			_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, r)
			_, _ = conn.Exec(ctx, `DROP OWNED BY `+ident)
			if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+ident); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
	return app, operator
}

// roleClient is a client on the test's database as role.
func roleClient(t *testing.T, b *testBundle, role string) *queue.Client {
	t.Helper()
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "pw-"+role)
	client, err := queue.NewClient(pgtest.Connect(t, u.String()), queue.Config{})
	require.NoError(t, err)
	return client
}

// superURL is the server's URL (a role that may create roles) naming the
// database of dbURL.
func superURL(t testing.TB, dbURL string) string {
	t.Helper()
	s, err := url.Parse(pgtest.ServerURL(t))
	require.NoError(t, err)
	d, err := url.Parse(dbURL)
	require.NoError(t, err)
	s.Path = d.Path
	return s.String()
}

func randomHex(t *testing.T) string {
	t.Helper()
	p := make([]byte, 6)
	_, err := rand.Read(p)
	require.NoError(t, err)
	return hex.EncodeToString(p)
}
