package pgtest

import (
	"context"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// startContainer starts a throwaway PostgreSQL 15 container when a Docker
// engine answers; testcontainers' reaper removes it when the test binary exits.
func startContainer(ctx context.Context) (_ string, err error) {
	defer func() {
		// testcontainers panics on some hosts without Docker instead of
		// returning an error.
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	c, err := testcontainers.Run(ctx, "postgres:15",
		testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": "postgres"}),
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2)),
	)
	if err != nil {
		return "", err
	}
	host, err := c.Host(ctx)
	if err != nil {
		return "", err
	}
	port, err := c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://postgres:postgres@%s:%s/postgres?sslmode=disable", host, port.Port()), nil
}
