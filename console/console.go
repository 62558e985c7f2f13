package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/queue"

	"github.com/batchq/batchq/internal/decimal"
)

// Defaults of Options.
const (
	DefaultTopTenants = 20
	DefaultRefresh    = 2 * time.Second
	DefaultReserve    = 0.2
	// MaxRefresh bounds Refresh: a browser's timer takes no longer delay.
	MaxRefresh    = 24 * time.Hour
	DefaultWindow = 15 * time.Minute
)

// Options configures Handler. nil means every default: read-only.
type Options struct {
	// Token enables the actions: a browser signs in with it, a script sends
	// it as a bearer token. "": the console is read-only. At least 16 bytes.
	Token string
	// BasePath is the path the handler is mounted at, without a trailing
	// slash ("/batchq"), so its links and cookies carry it; the handler
	// itself expects requests with it stripped (http.StripPrefix). "": the
	// root.
	BasePath string
	// TopTenants is how many tenants of a queue have a row of their own on
	// its page, those with the most queued tokens; the rest are summed as
	// "others". 0: DefaultTopTenants.
	TopTenants int
	// Refresh is how often a page fetches its numbers again. 0:
	// DefaultRefresh.
	Refresh time.Duration
	// Reserve is the fraction of each quota key's limit the workers leave
	// to interactive calls (their throttle.Config.Reserve, or `batchq work
	// --reserve`, whose default is DefaultReserve), shown on the overview.
	// It must be in [0, 1); 0 is no reserve, as for the throttle.
	Reserve float64
	// Now is the clock. nil: time.Now.
	Now func() time.Time
	// Logger receives the errors pages and actions hit. nil: slog.Default().
	Logger *slog.Logger
}

// MinTokenBytes is the shortest Options.Token accepted.
const MinTokenBytes = 16

func (o Options) withDefaults() (Options, error) {
	if o.Token != "" && len(o.Token) < MinTokenBytes {
		return o, fmt.Errorf("batchq: console: token: must be at least %d bytes (got %d)", MinTokenBytes, len(o.Token))
	}
	if o.BasePath != "" && (!strings.HasPrefix(o.BasePath, "/") || strings.HasSuffix(o.BasePath, "/")) {
		return o, fmt.Errorf("batchq: console: base path %q: must start with / and not end with it", o.BasePath)
	}
	if o.TopTenants == 0 {
		o.TopTenants = DefaultTopTenants
	}
	if o.TopTenants < 1 || o.TopTenants > 1000 {
		return o, fmt.Errorf("batchq: console: top tenants: must be in 1..1000 (got %d)", o.TopTenants)
	}
	if o.Refresh == 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Refresh < 100*time.Millisecond || o.Refresh > MaxRefresh {
		return o, fmt.Errorf("batchq: console: refresh: must be from 100ms to %s (got %s)", MaxRefresh, o.Refresh)
	}
	if !(o.Reserve >= 0 && o.Reserve < 1) {
		return o, fmt.Errorf("batchq: console: reserve: must be in [0,1) (got %s)", decimal.Format(o.Reserve))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// server is the console over one client. It is safe for concurrent use.
type server struct {
	c     *queue.Client
	o     Options
	pages map[string]*template.Template
	auth  auth
}

// Handler returns the console over client. It returns an error naming the
// first option out of range.
func Handler(client *queue.Client, opts *Options) (http.Handler, error) {
	if client == nil {
		return nil, errors.New("batchq: console: client is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &server{c: client, o: o, auth: auth{token: o.Token}}
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page("overview", s.overview))
	mux.HandleFunc("GET /queues/{queue}", s.page("queue", s.queuePage))
	mux.HandleFunc("GET /queues/{queue}/chart.svg", s.chart)
	mux.HandleFunc("GET /queues/{queue}/tenants/{tenant}", s.page("tenant", s.tenantPage))
	mux.HandleFunc("GET /jobs/{id}", s.page("job", s.jobPage))
	mux.HandleFunc("GET /login", s.page("login", s.loginPage))
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.HandleFunc("POST /queues/{queue}/pause", s.action(s.pause))
	mux.HandleFunc("POST /queues/{queue}/resume", s.action(s.resume))
	mux.HandleFunc("POST /queues/{queue}/tenants/{tenant}/settings", s.action(s.setTenant))
	mux.HandleFunc("POST /queues/{queue}/tenants/{tenant}/cancel", s.action(s.cancelTenant))
	mux.HandleFunc("POST /jobs/{id}/retry", s.action(s.retryJob))
	mux.HandleFunc("GET /static/{file}", s.static(static))
	mux.HandleFunc("/", s.noPage(mux))
	return securityHeaders(mux), nil
}

// static serves a file of the console's own, never a listing of them; no
// such file is the console's 404 page.
func (s *server) static(files fs.FS) http.HandlerFunc {
	serve := http.StripPrefix("/static/", http.FileServer(http.FS(files)))
	return func(w http.ResponseWriter, r *http.Request) {
		if st, err := fs.Stat(files, r.PathValue("file")); err != nil || st.IsDir() {
			s.fail(w, r, errorf(http.StatusNotFound, "no file %s%s: the console has no such file", s.o.BasePath, r.URL.Path))
			return
		}
		serve.ServeHTTP(w, r)
	}
}

// noPage answers a request no pattern of mux takes with the console's own
// error page, not the mux's plain text: a 405 naming the methods when the
// path takes others, a 404 when it names no page. mux sends it every such
// request, as the pattern "/".
func (s *server) noPage(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			header := strings.Join(allow, ", ")
			if allow[0] == http.MethodGet {
				header = strings.Replace(header, "GET", "GET, HEAD", 1) // as the mux answers
			}
			w.Header().Set("Allow", header)
			s.fail(w, r, errorf(http.StatusMethodNotAllowed, "%s %s%s: this address takes %s only",
				r.Method, s.o.BasePath, r.URL.Path, strings.Join(allow, " and ")))
			return
		}
		s.fail(w, r, errorf(http.StatusNotFound, "no page at %s%s: the console's pages are %s/, %[3]s/queues/QUEUE, "+
			"%[3]s/queues/QUEUE/tenants/TENANT and %[3]s/jobs/ID", s.o.BasePath, r.URL.Path, s.o.BasePath))
	}
}

// securityHeaders keeps the console's pages out of frames and its scripts
// to its own.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		// No queue or tenant name holds a NUL or bytes that are not UTF-8
		// (the database refuses them): such a path names nothing.
		if p := r.URL.Path; !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
			http.Error(w, "batchq console: the path must be UTF-8 without NUL", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// LoopbackOnly serves h only to requests addressed to this machine by a
// loopback name: localhost, or a loopback IP, with any port. A console
// bound to loopback wraps its handler in it, so that a web page whose name
// an attacker re-points at 127.0.0.1 (DNS rebinding) cannot read it: the
// browser sends that page's name as the Host.
func LoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		ip := net.ParseIP(host)
		if !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "batchq console: this console answers only to localhost or a loopback address", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// TunePool sets what the console asks of the database on the connections of
// a pool opened for it, unless the pool's configuration (its URL's query,
// or a -c in its options) sets it already: no parallel workers. A page's
// reads are many small index probes and one pass over a window's outcomes,
// and on a server that also runs the queue, parallel workers would take the
// cores the claims run on: on a 2-core server they made each page's
// slowest read slower, not faster, in alternated runs (BENCHMARKS.md,
// "console").
// `batchq console` calls it; an application that mounts Handler on a pool
// of its own may too.
func TunePool(cfg *pgxpool.Config) {
	const name = "max_parallel_workers_per_gather"
	params := cfg.ConnConfig.RuntimeParams
	if _, ok := params[name]; ok || strings.Contains(params["options"], name) {
		return
	}
	params[name] = "0"
}
