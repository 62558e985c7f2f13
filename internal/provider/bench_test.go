package provider_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/batchq/batchq/internal/provider"
)

// BenchmarkServeHTTP is the handler's own cost per request, without a
// network, so that benchmarks of a client against it measure the client.
func BenchmarkServeHTTP(b *testing.B) {
	for _, refill := range []provider.Refill{provider.FixedWindow, provider.TokenBucket} {
		b.Run(refill.String(), func(b *testing.B) {
			p, err := provider.New(provider.Config{
				RequestsPerWindow: 1 << 40, TokensPerWindow: 1 << 50, Refill: refill,
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"estimated_tokens":250}`))
					req.Header.Set(provider.DefaultJobHeader, "job")
					p.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		})
	}
}
