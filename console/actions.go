package console

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/batchq/batchq/internal/decimal"
	"github.com/batchq/batchq/queue"
)

// actionFunc takes an action and returns what it did, for the page it
// redirects to, and where that page is.
type actionFunc func(r *http.Request) (done, back string, err error)

// maxForm bounds an action's form.
const maxForm = 64 << 10

// action serves an action: it refuses one without the token, from a session
// without the form's CSRF token, or from another site, then takes it and
// redirects to its page with what it did (Post/Redirect/Get).
func (s *server) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := parseForm(w, r); err != nil {
			s.fail(w, r, err)
			return
		}
		if status, msg := s.auth.refusal(r); status != 0 {
			s.fail(w, r, errorf(status, "%s", msg))
			return
		}
		done, back, err := fn(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.o.Logger.Info("console: action", "path", r.URL.Path, "done", done)
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(done), Path: s.cookiePath(),
			HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: 60})
		http.Redirect(w, r, s.o.BasePath+back, http.StatusSeeOther)
	}
}

// parseForm reads r's form, at most maxForm bytes of it: a larger one is a
// 413, one that does not parse a 400. The bound holds for a body of any
// type: a multipart form is read within it, and the rest of a body that is
// no form is read to its end, so nothing over it is acted on.
func parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	var err error
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		err = r.ParseMultipartForm(maxForm)
	} else {
		err = r.ParseForm()
	}
	if err == nil {
		_, err = io.Copy(io.Discard, r.Body)
	}
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return errorf(http.StatusRequestEntityTooLarge, "the form is larger than %d KiB, the most the console takes", maxForm>>10)
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "the form does not parse: %v", err)
	}
	return nil
}

func queuePath(name string) string { return "/queues/" + pathEscape(name) }

func tenantPath(q, t string) string { return queuePath(q) + "/tenants/" + pathEscape(t) }

// pathEscape escapes s as one segment of a path. A tenant may be named "."
// or "..", which a browser resolves against the segments before them
// however their dots are written (%2E is a dot segment too). Such a name
// is written with a unit separator after it (%1F), which no name can hold
// (names have no control characters), and pathName takes it off.
func pathEscape(s string) string {
	if s == "." || s == ".." {
		s += dotMark
	}
	return url.PathEscape(s)
}

// dotMark follows a name of dots in a path; see pathEscape.
const dotMark = "\x1f"

// pathName is the name a path segment holds, as pathEscape wrote it.
func pathName(r *http.Request, key string) string {
	v := r.PathValue(key)
	if v == "."+dotMark || v == ".."+dotMark {
		return strings.TrimSuffix(v, dotMark)
	}
	return v
}

func (s *server) pause(r *http.Request) (string, string, error) {
	name := r.PathValue("queue")
	changed, err := s.c.PauseQueue(r.Context(), name)
	if err != nil {
		return "", "", err
	}
	if !changed {
		return "queue " + name + " was paused already", queuePath(name), nil
	}
	return "paused queue " + name + ": its workers claim nothing until it is resumed", queuePath(name), nil
}

func (s *server) resume(r *http.Request) (string, string, error) {
	name := r.PathValue("queue")
	changed, err := s.c.ResumeQueue(r.Context(), name)
	if err != nil {
		return "", "", err
	}
	if !changed {
		return "queue " + name + " was running already", queuePath(name), nil
	}
	return "resumed queue " + name, queuePath(name), nil
}

// setTenant changes a tenant's weight or bound: in this queue (scope
// "queue", the default) or in every queue ("all"). An empty field stays as
// it is; 0 goes back to the setting below it.
func (s *server) setTenant(r *http.Request) (string, string, error) {
	qn, tn := r.PathValue("queue"), pathName(r, "tenant")
	var u queue.TenantUpdate
	if v := strings.TrimSpace(r.PostFormValue("weight")); v != "" {
		f, ok := decimal.ParseFloat(v)
		if !ok {
			return "", "", errorf(http.StatusBadRequest, "weight %q: must be a decimal number in %v..%v, such as 2, 0.5 or 1e-3 (digits, an optional fraction and exponent)",
				v, queue.MinWeight, queue.MaxWeight)
		}
		u.Weight = &f
	}
	if v := strings.TrimSpace(r.PostFormValue("max_queued")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", "", errorf(http.StatusBadRequest, "max_queued %q: must be a whole number, 0 meaning the bound below it", v)
		}
		u.MaxQueued = &n
	}
	if u.Weight == nil && u.MaxQueued == nil {
		return "", "", errorf(http.StatusBadRequest, "weight and max_queued are both empty: give one or both")
	}
	switch scope := r.PostFormValue("scope"); scope {
	case "", "queue":
		t, err := s.c.UpdateQueueTenant(r.Context(), qn, tn, u)
		if err != nil {
			return "", "", err
		}
		return fmt.Sprintf("tenant %s in queue %s: weight %s, bound %s", tn, qn,
				orBelow(strconv.FormatFloat(t.Weight, 'g', -1, 64), t.Weight == 0), orBelow(strconv.Itoa(t.MaxQueued), t.MaxQueued == 0)),
			tenantPath(qn, tn), nil
	case "all":
		if u.Weight != nil && *u.Weight == 0 {
			return "", "", errorf(http.StatusBadRequest, "weight 0: a tenant's weight for every queue must be in %v..%v", queue.MinWeight, queue.MaxWeight)
		}
		t, err := s.c.UpdateTenant(r.Context(), tn, u)
		if err != nil {
			return "", "", err
		}
		return fmt.Sprintf("tenant %s in every queue: weight %s, bound %s", tn,
				strconv.FormatFloat(t.Weight, 'g', -1, 64), orBelow(strconv.Itoa(t.MaxQueued), t.MaxQueued == 0)),
			tenantPath(qn, tn), nil
	default:
		return "", "", errorf(http.StatusBadRequest, "scope %q: must be queue or all", scope)
	}
}

func orBelow(s string, unset bool) string {
	if unset {
		return "as set below"
	}
	return s
}

// cancelTenant cancels a tenant's unfinished jobs in a queue. The form
// carries the count the page showed (the dry run) and when it read it: when
// the tenant has more waiting jobs now, nothing is cancelled and the page
// shows the new count; jobs enqueued after the page read them are never
// cancelled, so one that arrived as another finished is not taken for it.
// A form without asof (a script's) is checked by its count alone.
func (s *server) cancelTenant(r *http.Request) (string, string, error) {
	qn, tn := r.PathValue("queue"), pathName(r, "tenant")
	v := r.PostFormValue("expect")
	expect, err := strconv.ParseInt(v, 10, 64)
	if err != nil || expect < 0 {
		return "", "", errorf(http.StatusBadRequest, "expect %q: must be the number of jobs the page said would be cancelled", v)
	}
	var asOf time.Time // none: a form from a script, which confirms the count only
	if a := r.PostFormValue("asof"); a != "" {
		if asOf, err = time.Parse(time.RFC3339Nano, a); err != nil || asOf.IsZero() {
			return "", "", errorf(http.StatusBadRequest, "asof %q: must be the time the page counted the jobs (RFC 3339); reload the page", a)
		}
	}
	f := queue.JobFilter{Queue: qn, Tenant: tn}
	n, err := s.c.CountJobs(r.Context(), f)
	if err != nil {
		return "", "", err
	}
	if n.Total() == 0 {
		// Nothing to cancel: a tenant the queue does not know is a 404, as
		// its page is, not "cancelled 0" and a redirect to that 404.
		if _, err := s.c.TenantInQueueSettings(r.Context(), qn, tn); errors.Is(err, queue.ErrUnknownTenant) {
			return "", "", errorf(http.StatusNotFound,
				"no tenant %q in queue %q: it has no jobs, settings or outcomes of the last day there", tn, qn)
		}
	}
	if n.Total() > expect {
		return fmt.Sprintf("nothing cancelled: %s now has %d unfinished jobs in %s, more than the %d confirmed; check the new count and confirm again",
			tn, n.Total(), qn, expect), tenantPath(qn, tn), nil
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		reason = "cancelled from the console"
	}
	if !asOf.IsZero() {
		f.EnqueuedBefore = asOf.Add(time.Microsecond) // the database keeps microseconds
	}
	st, err := s.c.CancelJobs(r.Context(), f, reason)
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("cancelled %d waiting jobs of %s in %s; asked %d running jobs to stop", st.Cancelled, tn, qn, st.Stopping),
		tenantPath(qn, tn), nil
}

// retryJob runs a job again: one waiting to retry is made due now, a
// finished one that did not succeed is resubmitted as a copy.
func (s *server) retryJob(r *http.Request) (string, string, error) {
	id, err := jobID(r)
	if err != nil {
		return "", "", err
	}
	back := "/jobs/" + strconv.FormatInt(id, 10)
	err = s.c.RetryNow(r.Context(), id)
	if err == nil {
		return fmt.Sprintf("job %d is due now: the next maintenance pass queues it again", id), back, nil
	}
	if !errors.Is(err, queue.ErrNotFound) {
		return "", "", err
	}
	o, err := s.c.Outcome(r.Context(), id)
	if errors.Is(err, queue.ErrNotFound) {
		// No outcome: an unfinished job (queued or running) has nothing to
		// retry yet, where the role may see it.
		if j, jerr := s.c.JobInfo(r.Context(), id); jerr == nil {
			return "", "", errorf(http.StatusConflict, "job %d is %s: only a job waiting to retry or scheduled, or one that failed, was discarded, expired or was cancelled, is retried", id, j.State)
		}
	}
	if err != nil {
		return "", "", err
	}
	if o.Outcome == "succeeded" {
		return "", "", errorf(http.StatusConflict, "job %d succeeded: only failed, discarded, expired or cancelled jobs are retried", id)
	}
	e, err := s.c.Resubmit(r.Context(), id)
	if err != nil {
		return "", "", err
	}
	if e.Duplicate {
		return fmt.Sprintf("job %d was resubmitted already, as job %d", id, e.ID), "/jobs/" + strconv.FormatInt(e.ID, 10), nil
	}
	return fmt.Sprintf("resubmitted job %d as job %d", id, e.ID), "/jobs/" + strconv.FormatInt(e.ID, 10), nil
}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	// Read the form first: a token cut off by the limit is no wrong token.
	if err := parseForm(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.auth.enabled() {
		s.fail(w, r, errorf(http.StatusForbidden, "the console is read-only: it was started without a token"))
		return
	}
	if !sameOrigin(r) {
		s.fail(w, r, errorf(http.StatusForbidden, "refused: the request comes from another site"))
		return
	}
	if !s.auth.checkToken(r.PostFormValue("token")) {
		s.fail(w, r, errorf(http.StatusUnauthorized, "wrong token"))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.auth.newSession(), Path: s.cookiePath(),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	next := r.PostFormValue("next")
	if !localPath(next) {
		next = "/"
	}
	http.Redirect(w, r, s.o.BasePath+next, http.StatusSeeOther)
}

func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.fail(w, r, errorf(http.StatusForbidden, "refused: the request comes from another site"))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: s.cookiePath(), MaxAge: -1})
	http.Redirect(w, r, s.o.BasePath+"/", http.StatusSeeOther)
}

// localPath reports whether next is a path on this console to return to
// after signing in: absolute, and nothing a browser could read as another
// host. Browsers drop tabs and newlines from URLs and read a backslash as a
// slash, so "/\t/host" would become "//host".
func localPath(next string) bool {
	if !strings.HasPrefix(next, "/") || strings.ContainsAny(next, "\\") {
		return false
	}
	for _, r := range next {
		if r < 0x20 || r == 0x7f || unicode.IsSpace(r) {
			return false
		}
	}
	return !strings.HasPrefix(next, "//")
}
