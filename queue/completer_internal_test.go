package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A finish is retried without end only while the database is out of reach:
// a refusal, a lock wait that ran out of time or a closed pool is given up
// after the retry window, as any error that retrying does not mend.
func TestIsUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &pgconn.ConnectError{}, true},
		{"connection reset", fmt.Errorf("write: %w", &net.OpError{Op: "read", Err: syscall.ECONNRESET}), true},
		{"connection ended mid-statement", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"server shutting down", &pgconn.PgError{Code: "57P01"}, true},
		{"server starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"a try out of time", fmt.Errorf("complete: %w", context.DeadlineExceeded), false},
		{"a network read out of time", &net.OpError{Op: "read", Err: timeoutError{}}, false},
		{"unknown queue", unknownQueue("q"), false},
		{"unknown queue from the server", &pgconn.PgError{Code: "BQ201"}, false},
		{"permission denied", &pgconn.PgError{Code: "42501"}, false},
		{"lock timeout", &pgconn.PgError{Code: "55P03"}, false},
		{"closed pool", errors.New("closed pool"), false},
	} {
		require.Equal(t, tc.want, isUnreachable(tc.err), tc.name)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
