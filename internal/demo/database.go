package demo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/batchq/batchq/migrations"
)

var databaseName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CheckDatabaseName returns an error unless name is a database name the
// demo may create: 1-63 of a-z, 0-9 and _, not starting with a digit.
func CheckDatabaseName(name string) error {
	if !databaseName.MatchString(name) {
		return fmt.Errorf("batchq: demo database name %q: must be 1-63 characters of a-z, 0-9 and _, not starting with a digit", name)
	}
	return nil
}

// admin connects to the server of serverURL for CREATE and DROP DATABASE:
// to the URL's own database (the maintenance database, postgres by
// default), or to postgres if that is the demo's.
func admin(ctx context.Context, serverURL, name string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: database URL: %w", err)
	}
	if cfg.Database == name {
		cfg.Database = "postgres"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: connect to %s on %s: %w", cfg.Database, cfg.Host, err)
	}
	return conn, nil
}

// DropDatabase drops the demo database name from the server of serverURL,
// if it exists, closing its connections.
func DropDatabase(ctx context.Context, serverURL, name string) error {
	if err := CheckDatabaseName(name); err != nil {
		return err
	}
	conn, err := admin(ctx, serverURL, name)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("batchq: demo: drop database %s: %w", name, err)
	}
	return nil
}

// Marker is the comment on a database the demo created. The demo drops and
// re-creates its database on every run, so it drops only a database that
// carries this comment (or the default one of builds that did not mark it),
// and no database someone else made.
const Marker = "batchq demo: created by batchq demo, which drops and re-creates it on each run"

// ErrNotTheDemos is CheckMayDrop's answer for a database the demo did not
// create.
var ErrNotTheDemos = errors.New("batchq: demo: the database exists and the demo did not create it")

// mayDrop reports whether the demo may drop the database name that exists
// with comment (nil: none). Builds before the marker left their database,
// always the default one, unmarked; that one is taken as the demo's, any
// other unmarked database is not.
func mayDrop(name string, comment *string) bool {
	if comment == nil {
		return name == DefaultDatabaseName
	}
	return *comment == Marker
}

// CheckMayDrop returns ErrNotTheDemos when the database name exists on the
// server of serverURL and is not the demo's to drop, and nil when Run may
// drop and re-create it.
func CheckMayDrop(ctx context.Context, serverURL, name string) error {
	conn, err := admin(ctx, serverURL, name)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var comment *string
	err = conn.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("batchq: demo: look for database %s: %w", name, err)
	case !mayDrop(name, comment):
		return ErrNotTheDemos
	}
	return nil
}

// freshDatabase drops and creates the demo database name on the server of
// serverURL, so every run starts from nothing, migrates it, and returns a
// pool configuration for it.
func freshDatabase(ctx context.Context, serverURL, name string) (*pgxpool.Config, error) {
	if err := CheckDatabaseName(name); err != nil {
		return nil, err
	}
	poolCfg, err := pgxpool.ParseConfig(serverURL)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: database URL: %w", err)
	}
	poolCfg.ConnConfig.Database = name

	if err := DropDatabase(ctx, serverURL, name); err != nil {
		return nil, err
	}
	conn, err := admin(ctx, serverURL, name)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err == nil {
		// Marked at once, so a run cut short leaves it the demo's to drop.
		// COMMENT takes no parameters: Marker is a constant literal.
		_, err = conn.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+Marker+"'")
	}
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: create database %s (the demo needs a role that may create databases): %w", name, err)
	}

	db := stdlib.OpenDB(*poolCfg.ConnConfig.Copy())
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		return nil, fmt.Errorf("batchq: demo: migrate %s: %w", name, err)
	}
	return poolCfg, nil
}

// databaseURL is serverURL naming the database name, with any password
// hidden, for people to copy; "" if serverURL is not a URL.
func databaseURL(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return ""
	}
	u.Path = "/" + name
	return u.Redacted()
}
