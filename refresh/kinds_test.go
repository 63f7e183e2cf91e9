package refresh

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bigtables/bigtables/schema"
)

// TestKindTable walks the strategy kinds: each has a valid example, a delay,
// an explanation of its own, fields that exist, and an entry in the
// published JSON Schema that takes exactly its fields.
func TestKindTable(t *testing.T) {
	var doc struct {
		Defs struct {
			Strategy struct {
				OneOf []map[string]any `json:"oneOf"`
			} `json:"strategy"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schema.Policy, &doc); err != nil {
		t.Fatal(err)
	}
	entries := map[string]map[string]any{}
	for _, e := range doc.Defs.Strategy.OneOf {
		props, _ := e["properties"].(map[string]any)
		kind, _ := props["kind"].(map[string]any)
		name, _ := kind["const"].(string)
		entries[name] = e
	}
	seen := map[string]bool{}
	explanations := map[string]string{}
	for _, spec := range kinds {
		t.Run(spec.name, func(t *testing.T) {
			if seen[spec.name] {
				t.Fatalf("kind %s is in the table twice", spec.name)
			}
			seen[spec.name] = true
			if spec.delay == nil || spec.validate == nil || spec.explain == nil || (spec.attempts == nil) != spec.safely {
				t.Fatalf("kind %s lacks a delay, validate, explain or attempts function", spec.name)
			}
			s, err := ParseStrategy(spec.example)
			if err != nil || s.Kind != spec.name {
				t.Fatalf("example %q: %v", spec.example, err)
			}
			for _, f := range append(slices.Clone(spec.fields), spec.required...) {
				if _, ok := fieldOf(f); !ok {
					t.Errorf("field %s is not a Strategy field", f)
				}
			}
			for _, f := range spec.required {
				if !slices.Contains(spec.fields, f) {
					t.Errorf("required field %s is not one of the kind's fields", f)
				}
			}
			if _, ok := s.Delay(Input{Failure: 1, Draw: 0.5}); !ok && s.Attempts() != 1 {
				t.Errorf("example %q has no delay after the first failure", spec.example)
			}
			if s.Randomized() != spec.randomized {
				t.Errorf("Randomized() = %v for %q", s.Randomized(), spec.example)
			}
			line := explainStrategy(s)
			if line == "" || strings.Contains(line, "%!") {
				t.Errorf("explanation %q", line)
			}
			if other, dup := explanations[line]; dup {
				t.Errorf("explains %q exactly as kind %s does", line, other)
			}
			explanations[line] = spec.name

			want := schemaEntry(t, spec)
			got, ok := entries[spec.name]
			if !ok {
				b, _ := json.MarshalIndent(want, "        ", "  ")
				t.Fatalf("schema/policy.schema.json has no entry for kind %s in $defs.strategy.oneOf; add:\n        %s", spec.name, b)
			}
			if !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("schema entry of kind %s differs from the table:\n got %s\nwant %s", spec.name, g, w)
			}
		})
	}
	for name := range entries {
		if _, ok := kindOf(name); !ok {
			t.Errorf("the schema has kind %q, the table does not", name)
		}
	}
}

// schemaEntry is the JSON Schema the table gives a kind, decoded.
func schemaEntry(t *testing.T, spec kindSpec) map[string]any {
	t.Helper()
	props := map[string]any{"kind": map[string]any{"const": spec.name}}
	for _, name := range spec.fields {
		f, _ := fieldOf(name)
		var v any
		if err := json.Unmarshal([]byte(f.schema), &v); err != nil {
			t.Fatalf("schema of field %s: %v", name, err)
		}
		props[name] = v
	}
	required := []any{"kind"}
	for _, r := range spec.required {
		required = append(required, r)
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// TestStrategyFieldsCoverTheStruct: every JSON field of Strategy but kind
// has one entry in strategyFields, which setFields and the --strategy flag
// use, and every entry is a field of Strategy.
func TestStrategyFieldsCoverTheStruct(t *testing.T) {
	var tags []string
	rt := reflect.TypeOf(Strategy{})
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "kind" {
			tags = append(tags, name)
		}
	}
	var names []string
	for _, f := range strategyFields {
		names = append(names, f.name)
	}
	if !slices.Equal(tags, names) {
		t.Errorf("Strategy's JSON fields %v, strategyFields %v: keep them in the same order", tags, names)
	}
	// Each field's isSet sees the field it names.
	for _, f := range strategyFields {
		var one Strategy
		b, _ := json.Marshal(map[string]any{"kind": "x", f.name: sampleValue(f.compact)})
		if err := json.Unmarshal(b, &one); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if got := one.setFields(); !slices.Equal(got, []string{f.name}) {
			t.Errorf("a strategy with only %s set reports %v set", f.name, got)
		}
	}
}

func sampleValue(c compactForm) any {
	switch c {
	case compactNumber:
		return 2
	case compactDurations:
		return []string{"1m"}
	case compactNumbers:
		return []int{1}
	case compactBands:
		return []map[string]string{{"until": "1h", "every": "1m"}}
	case compactJitter:
		return map[string]string{"kind": "full"}
	}
	return "5s"
}
