package boundaries

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/bigtables/bigtables/"

// Code that reaches a database, Redis or HTTP: an import path equal to one
// of these, or below it.
var (
	database = []string{"database/sql", "github.com/lib/pq", "github.com/jmoiron/sqlx", module + "store"}
	redis    = []string{"github.com/redis/go-redis", module + "queue"}
	http     = []string{"net/http"}
)

// rule forbids packages from importing, directly or not, any of forbidden.
type rule struct {
	name      string
	packages  []string // relative to the module
	forbidden []string
}

var rules = []rule{
	{"the pure core (refresh, schedule, protocol, upstream) does no I/O: no database, Redis or HTTP code",
		[]string{"refresh", "schedule", "protocol", "upstream"}, slices.Concat(database, redis, http)},
	{"workers never reach the database: worker does not import store",
		[]string{"worker"}, database},
	{"scheduler and poller are separate processes: neither imports the other",
		[]string{"scheduler"}, []string{module + "poller"}},
	{"scheduler and poller are separate processes: neither imports the other",
		[]string{"poller"}, []string{module + "scheduler"}},
	{"store owns SQL and knows no Redis",
		[]string{"store"}, redis},
	{"queue owns Redis and knows no SQL",
		[]string{"queue"}, database},
	{"the shared helpers (internal/redact, internal/wait) import only the standard library",
		[]string{"internal/redact", "internal/wait"}, []string{"github.com/", "golang.org/"}},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// graph returns every package the module's packages depend on, with its
// direct imports (test files left out: tests may reach anything).
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		g[p.ImportPath] = p.Imports
	}
	return g
}

// path returns the shortest import chain from 'from' to a package matching
// one of forbidden, or nil.
func path(g map[string][]string, from string, forbidden []string) []string {
	matches := func(p string) bool {
		return slices.ContainsFunc(forbidden, func(f string) bool {
			return p == f || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/")
		})
	}
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != from && matches(p) {
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append([]string{strings.TrimPrefix(q, module)}, chain...)
			}
			return chain
		}
		for _, next := range g[p] {
			if _, seen := prev[next]; !seen {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}

func TestBoundaries(t *testing.T) {
	g := graph(t)
	for _, r := range rules {
		for _, p := range r.packages {
			if _, ok := g[module+p]; !ok {
				t.Errorf("rule %q: package %s does not exist (update the rule)", r.name, p)
				continue
			}
			if chain := path(g, module+p, r.forbidden); chain != nil {
				t.Errorf("boundary broken: %s\n    %s", r.name, strings.Join(chain, " -> "))
			}
		}
	}
}

// The check finds what it looks for: a chain through an intermediate
// package is reported with every step.
func TestPathFindsIndirectImports(t *testing.T) {
	g := map[string][]string{module + "a": {"fmt", module + "b"}, module + "b": {"database/sql"}, "database/sql": {"context"}}
	got := fmt.Sprint(path(g, module+"a", database))
	if got != "[a b database/sql]" {
		t.Errorf("path = %s", got)
	}
	if p := path(g, module+"a", http); p != nil {
		t.Errorf("path to net/http = %v", p)
	}
}
