package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of the test server, so a test can
// cut every connection a client holds (a crash, a network partition, a
// database restart) without touching the server.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]bool
	down  bool
}

// NewProxy starts a proxy to the server of dbURL and returns it with a copy
// of dbURL that goes through it. It stops when the test ends.
func NewProxy(tb testing.TB, dbURL string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatalf("pgtest: proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pgtest: proxy: %v", err)
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	p := &Proxy{ln: ln, target: net.JoinHostPort(u.Hostname(), port), conns: map[net.Conn]bool{}}
	go p.serve()
	tb.Cleanup(func() { ln.Close(); p.Cut() })
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		go p.pipe(c)
	}
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.track(client, server)
	go func() { io.Copy(server, client); server.Close() }()
	io.Copy(client, server)
	client.Close()
}

func (p *Proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if p.down {
			c.Close()
		}
		p.conns[c] = true
	}
}

// Cut closes every connection through the proxy and refuses new ones until
// Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
