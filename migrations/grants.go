package migrations

import (
	_ "embed"
	"fmt"
	"strings"
	"unicode/utf8"
)

// GrantsTemplate is grants/grants.sql as embedded: the SQL that creates
// batchq's least-privilege roles, with psql variables :'app_role',
// :"app_role", :'worker_role', :"worker_role", :'operator_role' and
// :"operator_role" where the role names go, and the operator's grants
// between psql's \if :{?operator_role} and \endif, so psql runs it without
// operator_role too. It is not a migration: run it after migrating, with
// psql -v or through Grants.
//
//go:embed grants/grants.sql
var GrantsTemplate string

// Grants returns GrantsTemplate with the role names filled in, quoted, and
// the operator's grants included, ready to run as one script without psql.
// It creates appRole, which may enqueue and read reports, workerRole, which
// may claim and finish jobs, and operatorRole, which may pause, resume and
// delete queues, cancel jobs and read them, payloads included, where they
// do not exist, and grants each what it needs. Names must be 1-63 bytes of
// UTF-8 without control characters, differ from each other, and not be
// reserved ("public", "pg_…").
func Grants(appRole, workerRole, operatorRole string) (string, error) {
	roles := []struct{ which, name string }{{"app", appRole}, {"worker", workerRole}, {"operator", operatorRole}}
	for i, r := range roles {
		if rule := roleRule(r.name); rule != "" {
			return "", &RoleError{Role: r.which, Name: r.name, Rule: rule}
		}
		for _, earlier := range roles[:i] {
			if earlier.name == r.name {
				return "", &RoleError{Role: r.which, Name: r.name, Same: earlier.which}
			}
		}
	}
	sql := strings.NewReplacer(
		`:'app_role'`, quoteLiteral(appRole), `:"app_role"`, quoteIdent(appRole),
		`:'worker_role'`, quoteLiteral(workerRole), `:"worker_role"`, quoteIdent(workerRole),
		`:'operator_role'`, quoteLiteral(operatorRole), `:"operator_role"`, quoteIdent(operatorRole),
		// psql's conditional, which the operator role always meets here.
		`\if :{?operator_role}`, "", `\endif`, "",
	).Replace(GrantsTemplate)
	return sql, nil
}

// maxRoleBytes is PostgreSQL's NAMEDATALEN - 1: longer names are truncated.
const maxRoleBytes = 63

// RoleError is a role name Grants refuses: Role ("app", "worker" or
// "operator") is named Name, which breaks Rule, or which Same (an earlier
// role of the three) is named too.
type RoleError struct {
	Role, Name string
	Rule       string
	Same       string
}

func (e *RoleError) Error() string {
	if e.Same != "" {
		return fmt.Sprintf("batchq: grants: the %s role and the %s role must differ (both %q)", e.Same, e.Role, e.Name)
	}
	return fmt.Sprintf("batchq: grants: %s role: %s", e.Role, e.Rule)
}

// roleRule is the rule name breaks, "" for none.
func roleRule(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > maxRoleBytes:
		return fmt.Sprintf("must be at most %d bytes (got %d)", maxRoleBytes, len(name))
	case !utf8.ValidString(name):
		return "must be valid UTF-8"
	case strings.HasPrefix(name, "pg_"):
		return fmt.Sprintf("names starting with pg_ are reserved (got %q)", name)
	}
	switch name {
	case "public", "none", "current_role", "current_user", "session_user":
		return fmt.Sprintf("%q is reserved", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("must not contain control characters (got %q)", name)
		}
	}
	return ""
}

// quoteIdent quotes a name as an SQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// quoteLiteral quotes s as an SQL string literal, the E” form when it holds
// a backslash so it reads the same whatever standard_conforming_strings is.
func quoteLiteral(s string) string {
	q := strings.ReplaceAll(s, `'`, `''`)
	if strings.Contains(q, `\`) {
		return `E'` + strings.ReplaceAll(q, `\`, `\\`) + `'`
	}
	return `'` + q + `'`
}
