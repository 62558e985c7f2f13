package pgtest

import (
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

	mu     sync.Mutex
	conns  map[net.Conn]bool
	frozen map[net.Conn]bool // client ends whose bytes are dropped
	down   bool
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
	p := &Proxy{ln: ln, target: net.JoinHostPort(u.Hostname(), port), conns: map[net.Conn]bool{}, frozen: map[net.Conn]bool{}}
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
	go func() { p.copy(server, client, client); server.Close() }()
	p.copy(client, server, client)
	client.Close()
}

// copy is io.Copy that drops what it reads while the connection of client
// is frozen.
func (p *Proxy) copy(dst, src, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isFrozen(client) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) isFrozen(client net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen[client]
}

// Freeze makes every connection through the proxy now drop what it carries,
// both ways, without closing (as a NAT that forgot them, or a failover, does:
// the client hears nothing, and waits). New connections work. Cut closes
// them.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.frozen[c] = true
	}
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
	p.conns, p.frozen = map[net.Conn]bool{}, map[net.Conn]bool{}
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
