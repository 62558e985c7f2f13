package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batchq/batchq/queue"
)

// view is what every page's template gets.
type view struct {
	Base    string
	Path    string // the page's path and query, for its live refresh
	Rel     string // the same without Base, for sign-in to come back to
	Title   string
	Refresh int64 // milliseconds
	// Auth is whether actions may be taken at all (a token is set),
	// SignedIn whether this browser has a session, CSRF its forms' token.
	Auth     bool
	SignedIn bool
	CSRF     string
	Flash    string
	Now      time.Time
	Page     any
}

// liveHeader asks for a page's live part only: the console's script sends
// it when it refreshes the numbers.
const liveHeader = "X-Batchq-Live"

// flashCookie carries what an action did to the page it redirects to.
const flashCookie = "batchq_flash"

var pageNames = []string{"overview", "queue", "tenant", "job", "login", "error"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"num":  numAny,
		"pct":  func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
		"dur":  dur,
		"durp": func(d *time.Duration) string { return durPtr(d) },
		"ago": func(now time.Time, t *time.Time) string {
			if t == nil {
				return "–"
			}
			return dur(now.Sub(*t))
		},
		"when": func(t *time.Time) string {
			if t == nil {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"at":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"weight":  func(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) },
		"pathseg": pathEscape,
		"int64p": func(p *int64) string {
			if p == nil {
				return "–"
			}
			return num(*p)
		},
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("batchq: console: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// num writes n with thousands separators.
func num[T int | int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// numAny is num for a template, which hands it an int or an int64.
func numAny(v any) string {
	switch n := v.(type) {
	case int:
		return num(n)
	case int64:
		return num(n)
	}
	return fmt.Sprint(v)
}

// dur writes d the way an operator reads a wait: 850ms, 12.3s, 4m05s, 3h12m.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func durPtr(d *time.Duration) string {
	if d == nil {
		return "–"
	}
	return dur(*d)
}

// pageFunc gathers a page's data, or returns an error with its status.
type pageFunc func(r *http.Request) (title string, data any, err error)

// httpError is an error with the status to answer it with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status, fmt.Sprintf(format, args...)}
}

// page serves a page: whole, or only its live part when the console's
// script asks for it.
func (s *server) page(name string, fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		title, data, err := fn(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v := s.view(w, r, title, data)
		tmpl := "layout"
		if r.Header.Get(liveHeader) != "" {
			tmpl = "live"
		}
		s.render(w, http.StatusOK, name, tmpl, v)
	}
}

func (s *server) view(w http.ResponseWriter, r *http.Request, title string, data any) view {
	v := view{
		Base: s.o.BasePath, Title: title, Refresh: s.o.Refresh.Milliseconds(),
		Auth: s.auth.enabled(), Now: s.o.Now(), Page: data,
	}
	v.Rel = r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		v.Rel += "?" + r.URL.RawQuery
	}
	v.Path = s.o.BasePath + v.Rel
	if nonce := s.auth.session(r); nonce != "" {
		v.SignedIn, v.CSRF = true, s.auth.csrf(nonce)
	}
	if c, err := r.Cookie(flashCookie); err == nil && r.Header.Get(liveHeader) == "" {
		if msg, err := url.QueryUnescape(c.Value); err == nil {
			v.Flash = msg
		}
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: s.cookiePath(), MaxAge: -1})
	}
	return v
}

func (s *server) render(w http.ResponseWriter, status int, name, tmpl string, v view) {
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, tmpl, v); err != nil {
		s.o.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "batchq: console: could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(showBidiControls(buf.Bytes()))
}

// showBidiControls writes the Unicode bidirectional controls (U+202E and its
// kin) of a rendered page as the text \uNNNN, as the CLI's tables do. HTML
// escaping leaves them be, so a tenant, kind or error holding one would
// show itself, and the text after it, in another order than it holds. The
// escape is plain ASCII, safe in text and attributes alike; links carry
// names percent-encoded, so they still reach their pages.
func showBidiControls(page []byte) []byte {
	isBidi := func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }
	if !bytes.ContainsFunc(page, isBidi) {
		return page
	}
	out := make([]byte, 0, len(page)+32)
	for len(page) > 0 {
		r, size := utf8.DecodeRune(page)
		if isBidi(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, page[:size]...)
		}
		page = page[size:]
	}
	return out
}

// fail answers err with an error page: its status, and the reason in words.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := classify(err)
	if status >= 500 {
		s.o.Logger.Error("console", "path", r.URL.Path, "err", err)
	}
	v := s.view(w, r, http.StatusText(status), msg)
	s.render(w, status, "error", "layout", v)
}

// classify maps an error to a status and a message for the page. A server
// error's message says what went wrong in the console's words; the
// database's or the driver's own, which name hosts, users and SQL, go to
// the log (fail).
func classify(err error) (int, string) {
	var he *httpError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &he):
		return he.status, he.msg
	case errors.Is(err, queue.ErrUnknownQueue), errors.Is(err, queue.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, queue.ErrInvalidSettings), errors.Is(err, queue.ErrInvalidJob):
		return http.StatusBadRequest, err.Error()
	case errors.As(err, &pe) && pe.Code == "42501":
		return http.StatusForbidden, "refused by the database: the console's database role may not do this (" +
			pe.Message + "); see docs/sql-api.md#roles"
	case errors.As(err, &pe) && schemaMissing(pe.Code):
		return http.StatusServiceUnavailable, "the database does not hold the batchq schema this console reads, " +
			"or holds an older version of it: run 'batchq migrate up' (the console's log has the database's error)"
	case unreachable(err):
		return http.StatusServiceUnavailable, "the console cannot reach its database; " +
			"each request tries again (the console's log has the error)"
	}
	return http.StatusInternalServerError, "the console could not read the database (the console's log has the error)"
}

// schemaMissing reports whether code is the server not knowing a schema,
// table, column, function or type. The console reads only batchq's, so the
// database was not migrated, or not to this version.
func schemaMissing(code string) bool {
	switch code {
	case "3F000", "42P01", "42703", "42883", "42704":
		return true
	}
	return false
}

// unreachable reports whether err is the database out of reach: a
// connection that could not be made, that broke, or that the server ended.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &pe):
		// connection_exception, operator_intervention (a shutdown, say)
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	return false
}

func (s *server) cookiePath() string { return s.o.BasePath + "/" }
