package main

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/migrations"
)

func migrateGrantsCommand() *cli.Command {
	return &cli.Command{
		Name:  "grants",
		Usage: "print, or with --apply run, the SQL that creates least-privilege roles for the app, the workers and operators",
		Description: `The app role may enqueue (through batchq.enqueue, which runs as the schema's
owner) and read reports: the backlog and audit views, tenant usage, settings and the
quota, which its interactive calls also update. It cannot read job payloads or change
or delete anything else. The worker role may claim, heartbeat, complete, fail and
release jobs and maintain queues; it cannot enqueue, change settings, change a job's
tenant, cost or payload, or change or delete an outcome. It records cost corrections
that move tenants in the fair order, so it is for batchq's worker code only. The operator
role may run 'batchq queues pause|resume|delete|list', 'batchq jobs show|cancel',
'batchq tenants list' and 'batchq report': it reads jobs and outcomes whole, payloads
included. It cannot enqueue, claim or finish jobs, or write a table, so 'queues
create|set', 'tenants set|unset' and 'jobs retry' stay with the schema's owner. No role
may create, alter or drop anything, and the three roles must differ.

Missing roles are created with LOGIN. Passwords are read from the environment variables
that --app-password-env, --worker-password-env and --operator-password-env name, never
from the command line, and are sent to the server as SCRAM-SHA-256 verifiers, so the
server and its logs never see them. Run it after 'batchq migrate up', as the schema's
owner (if it may create roles) or a superuser. Without --apply the SQL goes to standard
output, so psql can run it (set passwords with psql's \password then):
  batchq migrate grants --app-role app --worker-role worker --operator-role ops | psql "$DATABASE_URL"
  psql -v app_role=app -v worker_role=worker -v operator_role=ops -f migrations/grants/grants.sql
psql without -v operator_role creates and grants only the app and worker roles.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "app-role", Usage: "the application's role: may enqueue and read reports", Value: "batchq_app", EnvVars: []string{"BATCHQ_APP_ROLE"}},
			&cli.StringFlag{Name: "worker-role", Usage: "the workers' role: may claim and finish jobs", Value: "batchq_worker", EnvVars: []string{"BATCHQ_WORKER_ROLE"}},
			&cli.StringFlag{Name: "operator-role", Usage: "the operators' role: may pause, resume and delete queues, cancel jobs and read them", Value: "batchq_operator", EnvVars: []string{"BATCHQ_OPERATOR_ROLE"}},
			&cli.BoolFlag{Name: "apply", Usage: "run the SQL on --database-url instead of printing it"},
			&cli.StringFlag{Name: "app-password-env", Usage: "with --apply, set the app role's password from this environment variable"},
			&cli.StringFlag{Name: "worker-password-env", Usage: "with --apply, set the worker role's password from this environment variable"},
			&cli.StringFlag{Name: "operator-password-env", Usage: "with --apply, set the operator role's password from this environment variable"},
			&cli.StringFlag{Name: "format", Usage: "with --apply: " + formatUsage + " (default: the global --format); " +
				"without --apply the SQL is text, and json or csv is refused"},
		},
		Action: migrateGrants,
	}
}

func migrateGrants(c *cli.Context) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	app, worker, operator := c.String("app-role"), c.String("worker-role"), c.String("operator-role")
	sql, err := migrations.Grants(app, worker, operator)
	if err != nil {
		return roleRefusal(c, err)
	}
	type password struct{ role, value string }
	var passwords []password
	for _, p := range []struct{ flag, role string }{{"app-password-env", app}, {"worker-password-env", worker}, {"operator-password-env", operator}} {
		if !c.IsSet(p.flag) {
			continue
		}
		if !c.Bool("apply") {
			return usagef("batchq: --%s goes with --apply", p.flag)
		}
		env := c.String(p.flag)
		v, ok := os.LookupEnv(env)
		if env == "" || !ok || v == "" {
			return usagef("batchq: --%s: environment variable %q is not set", p.flag, env)
		}
		if !printableASCII(v) {
			return usagef("batchq: --%s: the password in %s must be printable ASCII; set any other with psql's \\password", p.flag, env)
		}
		passwords = append(passwords, password{p.role, v})
	}
	if !c.Bool("apply") {
		if err := textOnly(c, "migrate grants", "without --apply it prints SQL, which is text only"); err != nil {
			return err
		}
		_, err := fmt.Fprint(c.App.Writer, sql)
		return err
	}
	f, err := outputFormat(c)
	if err != nil {
		return err
	}

	url, err := databaseURL(c)
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return usagef("batchq: --database-url: %v", err)
	}
	if err := requireMigrated(c, url); err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(c.Context, cfg)
	if err != nil {
		return fmt.Errorf("batchq: connect: %w", err)
	}
	defer conn.Close(c.Context)
	if _, err := conn.Exec(c.Context, sql); err != nil {
		return grantsRefusal(err, map[string]string{"app-role": app, "worker-role": worker, "operator-role": operator})
	}
	if f == formatTable {
		fmt.Fprintln(c.App.Writer, oneLine(fmt.Sprintf("granted: role %s may enqueue and read reports; role %s may claim and finish jobs; "+
			"role %s may pause, resume and delete queues, cancel jobs and read them", app, worker, operator)))
	}
	// With JSON or CSV, one record at the end says what was done, the
	// passwords set before a failure included.
	set := []string{}
	record := func() error {
		if f == formatTable {
			return nil
		}
		d := newDataset("app_role", "worker_role", "operator_role", "passwords_set")
		d.add(app, worker, operator, jsonCell(set))
		return writeRecord(c, d)
	}
	for _, p := range passwords {
		v, err := scramVerifier(p.value)
		if err == nil {
			// The verifier is base64 and SCRAM's own punctuation: no quote to escape.
			_, err = conn.Exec(c.Context, "ALTER ROLE "+pgx.Identifier{p.role}.Sanitize()+" PASSWORD '"+v+"'")
			if err != nil {
				err = fmt.Errorf("batchq: migrate grants: setting the password of role %s: %w", p.role, err)
			}
		}
		if err != nil {
			_ = record()
			return err
		}
		set = append(set, p.role)
		if f == formatTable {
			fmt.Fprintln(c.App.Writer, oneLine("set the password of role "+p.role))
		}
	}
	return record()
}

// roleRefusal says a role name Grants refused in the words of the flag that
// gave it (and so, through fromEnvironment, of the variable that set it).
// Of two flags that name the same role it names first the one its variable
// set, if only one was.
func roleRefusal(c *cli.Context, err error) error {
	var re *migrations.RoleError
	if !errors.As(err, &re) {
		return usageError{msg: err.Error()}
	}
	if re.Same != "" {
		first, second := re.Role, re.Same
		fromEnv := func(role string) bool {
			_, set := setByEnvironment(c, findFlag(c.Command.Flags, role+"-role"))
			return set
		}
		if !fromEnv(first) && fromEnv(second) {
			first, second = second, first
		}
		return usagef("batchq: migrate grants: --%s-role %q: must differ from --%s-role, which names the same role",
			first, re.Name, second)
	}
	return usagef("batchq: migrate grants: --%s-role: %s", re.Role, re.Rule)
}

// grantsRefusal says a role the grants script refused (the schema's owner,
// a superuser) as the usage error it is, naming the flag that gave it;
// other errors are the database's.
func grantsRefusal(err error, roles map[string]string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "P0001" || !strings.HasPrefix(pe.Message, "batchq: grants: ") {
		return fmt.Errorf("batchq: migrate grants: %w", err)
	}
	msg := strings.TrimPrefix(pe.Message, "batchq: grants: ")
	for _, flag := range []string{"app-role", "worker-role", "operator-role"} {
		if rule, ok := strings.CutPrefix(msg, roles[flag]+" "); ok {
			return usagef("batchq: migrate grants: --%s %s: %s", flag, roles[flag], rule)
		}
	}
	return usagef("batchq: migrate grants: %s", msg)
}

// requireMigrated fails unless every migration is applied: the grants name
// functions and columns of the latest schema.
func requireMigrated(c *cli.Context, url string) error {
	db, err := openSQL(url)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	pending, err := p.HasPending(c.Context)
	if err != nil {
		return fmt.Errorf("batchq: migrate grants: schema version: %w", err)
	}
	if pending {
		return fmt.Errorf("batchq: migrate grants: the schema is not up to date; run 'batchq migrate up' first")
	}
	return nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password (RFC 5802, RFC 7677), as psql's \password computes it, so the
// password itself never reaches the server. password must be printable
// ASCII, which SASLprep leaves as it is.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("batchq: salt: %w", err)
	}
	return scramVerifierWith(password, salt, scramIterations)
}

func scramVerifierWith(password string, salt []byte, iterations int) (string, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("batchq: password: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(mac(salted, "Server Key"))), nil
}
