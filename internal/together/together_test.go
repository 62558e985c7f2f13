package together_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/together"
)

// Every function runs, at once, and the error returned is the first in the
// list's order, even when a later one fails sooner.
func TestAllRunsEveryFunctionAndKeepsTheErrorsOrder(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	var ran atomic.Int32
	started := make(chan struct{})
	err := together.All(
		func() error { <-started; time.Sleep(10 * time.Millisecond); ran.Add(1); return first },
		func() error { close(started); ran.Add(1); return second }, // fails first
		func() error { ran.Add(1); return nil },
	)
	require.ErrorIs(t, err, first)
	require.EqualValues(t, 3, ran.Load())
	require.NoError(t, together.All(func() error { return nil }))
	require.NoError(t, together.All())
}
