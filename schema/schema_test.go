package schema_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/schema"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compile(t *testing.T, name string, b []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(name, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func valid(t *testing.T, s *jsonschema.Schema, doc string) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(v)
}

// Every policy the Go code writes validates against the published schema,
// and documents both refuse are refused by both.
func TestPolicySchemaMatchesTheCode(t *testing.T) {
	s := compile(t, "policy.schema.json", schema.Policy)
	strategies := []string{
		"list delays=0,1m jitter=full", "exponential initial=5s multiplier=2 max=300s max_attempts=8 jitter=additive:0.25",
		"linear initial=5s max_attempts=5", "fibonacci unit=1m max_attempts=7", "progressive", "progressive bands=1h:1m,2h:10m",
		"fix ms=3000 max_retry=3", "random-range min_ms=2000 max_ms=5000 max_retry=3", "random base_ms=3000 pct=0.5 max_retry=3",
		"random-exp-backoff base_ms=3000 pct=0.5 max_ms=240000 max_retry=3", "rand-cycle cycle_ms=1000,2000 pct=0.1 max_retry=0",
		"exponential initial=5s max=1m max_attempts=9 jitter=decorrelated", "exponential",
	}
	docs := []string{string(refresh.DefaultPolicy().JSON()),
		`{"retries":[0,"1m"],"final_reason":"thumbnail creation failed","notify":"https://hooks.example.com/x","notify_final":true,` +
			`"notes":["Send a request to the thumbnailer service"],"max_retry_after":"1h",` +
			`"on_kind":{"bad_input":"final","rate_limited":{"strategy":{"kind":"exponential"}}}}`,
		`{"strategy":{"kind":"fibonacci","unit":"1m"},"give_up_after":"1 week"}`}
	for _, text := range strategies {
		st, err := refresh.ParseStrategy(text)
		if err != nil {
			t.Fatal(err)
		}
		p := refresh.DefaultPolicy()
		p.SetStrategy(st)
		p.OnExhausted, p.GiveUpAfter = refresh.WaitNext, refresh.Duration(3600e9)
		docs = append(docs, string(p.JSON()))
	}
	for _, doc := range docs {
		if err := valid(t, s, doc); err != nil {
			t.Errorf("policy the code wrote fails the schema: %s\n%v", doc, err)
		}
		if _, err := refresh.ParsePolicy([]byte(doc), nil); err != nil {
			t.Errorf("policy the code wrote does not parse back: %s: %v", doc, err)
		}
	}
	for _, doc := range []string{
		`{"colour":"red"}`,
		`{"retries":["1m"],"strategy":{"kind":"fix","ms":1,"max_retry":1}}`,
		`{"on_exhausted":"panic"}`,
		`{"strategy":{"kind":"zigzag"}}`,
		`{"strategy":{"kind":"fix","ms":3000}}`,
		`{"strategy":{"kind":"exponential","initial":"5s","max_attempts":3,"ms":4}}`,
		`{"strategy":{"kind":"list","delays":["1m"],"jitter":{"kind":"wobbly"}}}`,
		`{"timeout":60}`,
		`{"retries":[5]}`,
		`{"notify":"ftp://example.com/"}`,
		`{"notify":"https://user:pw@example.com/"}`,
		`{"notify_final":"yes"}`,
		`{"on_kind":{"bad_input":"never"}}`,
		`{"on_kind":{"bad input":"final"}}`,
		`{"on_kind":{"x":{"retries":["1m"]}}}`,
		`{"on_kind":{"x":{"strategy":{"kind":"fix","ms":1}}}}`,
		`{"final_reason":7}`,
		`{"notes":"one"}`,
	} {
		if err := valid(t, s, doc); err == nil {
			t.Errorf("schema accepts %s", doc)
		}
		if _, err := refresh.ParsePolicy([]byte(doc), nil); err == nil {
			t.Errorf("the code accepts %s", doc)
		}
	}
}

// Jobs the scheduler writes, and results the Go worker library writes,
// validate against the published schemas; results the poller refuses are
// refused by the schema too, and the other way round.
func TestWireSchemasMatchTheCode(t *testing.T) {
	job := compile(t, "job.schema.json", schema.Job)
	res := compile(t, "result.schema.json", schema.Result)
	j := protocol.Job{BigTableUID: "report-42", AttemptUID: refresh.NewAttemptUID(), InputURL: "https://example.com/a.csv",
		AttemptNo: 3, DeadlineAt: time.Now().Add(time.Hour)}
	if err := valid(t, job, string(j.Encode())); err != nil {
		t.Errorf("job %s fails the schema: %v", j.Encode(), err)
	}
	no := false
	good := []protocol.Result{
		{BigTableUID: "b", AttemptUID: "c", Type: protocol.Success},
		{BigTableUID: "b", AttemptUID: "c", Type: protocol.Failure, Message: "500", Retryable: &no, UserFriendlyReason: "Provided URL is invalid: x"},
		{BigTableUID: "b", AttemptUID: "c", Type: protocol.Status, Message: "50%"},
		{BigTableUID: "b", AttemptUID: "c", Type: protocol.Failure, Message: "GET: 429", Kind: "rate_limited", RetryAfter: protocol.RetryAfterSeconds(30)},
		{BigTableUID: "b", AttemptUID: "c", Type: protocol.Failure, Kind: "upstream_5xx", RetryAfter: protocol.RetryAfterAt(time.Now())},
	}
	for _, r := range good {
		if err := valid(t, res, string(r.Encode())); err != nil {
			t.Errorf("result %s fails the schema: %v", r.Encode(), err)
		}
	}
	for _, doc := range []string{
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"success","extra":1}`,
		`{"big_table_uid":1,"refresh_attempt_uid":"c","type":"success"}`,
		`{"big_table_uid":"b","type":"success"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"done"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"success","retryable":false}`,
		`{"big_table_uid":"","refresh_attempt_uid":"c","type":"success"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","retryable":"no"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","kind":"rate_limited","retry_after":0.5}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","retry_after":"2024-03-04T06:00:00Z"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","retry_after":-1}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","retry_after":"soon"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","retry_after":[]}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","kind":"rate limited"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"failure","kind":"a\u0007b"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"success","kind":"x"}`,
		`{"big_table_uid":"b","refresh_attempt_uid":"c","type":"user_friendly_status","retry_after":1}`,
	} {
		_, decodeErr := protocol.DecodeResult([]byte(doc), 0)
		schemaErr := valid(t, res, doc)
		if (decodeErr == nil) != (schemaErr == nil) {
			t.Errorf("%s: the poller says %v, the schema says %v", doc, decodeErr, schemaErr)
		}
	}
}
