package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/metrics"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// metricsAddrFlag and metricsTopTenantsFlag are `batchq work`'s flags for
// its metrics endpoint; new values each time, as urfave/cli keeps state in
// a flag.
func metricsAddrFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "metrics-addr",
		Usage: "serve Prometheus metrics at http://ADDR/metrics; a bare :PORT listens on 127.0.0.1 only, " +
			"name a host (e.g. 0.0.0.0:9090) to listen on others (empty: no metrics)",
		EnvVars: []string{"BATCHQ_METRICS_ADDR"},
	}
}

func metricsTopTenantsFlag() cli.Flag {
	return &cli.IntFlag{
		Name:    "metrics-top-tenants",
		Usage:   `tenants per queue, those with the most queued tokens, with metric labels of their own; the rest are summed as tenant="other"`,
		Value:   metrics.DefaultTopTenants,
		EnvVars: []string{"BATCHQ_METRICS_TOP_TENANTS"},
	}
}

// checkMetricsFlags checks the metrics flags before anything connects; it
// returns the address to listen on ("" for no metrics).
func checkMetricsFlags(c *cli.Context) (listen string, err error) {
	// Checked whether or not metrics are served, as --reserve is: a bad
	// value is a mistake either way.
	if top := c.Int("metrics-top-tenants"); top < 1 || top > 10000 {
		return "", usagef("batchq: --metrics-top-tenants %d: must be in 1..10000", top)
	}
	if err := goesWith(c, "metrics-addr", "without an address no metrics are served", "metrics-top-tenants"); err != nil {
		return "", err
	}
	addr := c.String("metrics-addr")
	if addr == "" {
		return "", nil
	}
	listen, err = metricsListenAddr(addr)
	if err != nil {
		return "", usagef("batchq: %s: %v", givenFlag(c, "metrics-addr"), err)
	}
	return listen, nil
}

// startMetrics serves the pool's metrics at listen (checkMetricsFlags) when
// it is set: it wires wc.OnEvent to a collector and listens. stop shuts the
// server down.
func startMetrics(c *cli.Context, listen string, client *queue.Client, wc *queue.WorkerConfig, log *slog.Logger) (stop func(), err error) {
	if listen == "" {
		return func() {}, nil
	}
	top := c.Int("metrics-top-tenants")
	key := c.String("quota-key")
	cfg := metrics.Config{Client: client, Queues: []string{wc.Queue}, TopTenants: top, Logger: log}
	if wc.Throttle != nil {
		cfg.Throttles = map[string]*throttle.Throttle{key: wc.Throttle}
	}
	col, err := metrics.New(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hook := col.OnEvent(key)
	if prev := wc.OnEvent; prev != nil {
		wc.OnEvent = func(e queue.Event) { prev(e); hook(e) }
	} else {
		wc.OnEvent = hook
	}

	ln, err := net.Listen("tcp", listen)
	if dnsErr := (*net.DNSError)(nil); errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		// A host that names nothing is a bad value, as a bad port is; a port
		// in use or refused is not.
		return nil, usagef("batchq: %s: host %q is not found", givenFlag(c, "metrics-addr"), dnsErr.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("batchq: --metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: metricsHandler(reg), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// metricsHandler serves reg's metrics at GET /metrics (and HEAD); another
// method there is refused with 405, another path is a 404.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// metricsListenAddr is where --metrics-addr listens: as given, except that
// no host means loopback, not every interface. Metrics name tenants and
// queues; exposing them beyond this machine is for the user to ask for.
func metricsListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", errors.New("must be HOST:PORT or :PORT")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("port %q must be a number in 0..65535", port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
