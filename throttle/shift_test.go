package throttle_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/batchq/batchq/throttle"
)

// timeFields returns every time.Time in v (a pointer to a struct), found
// by reflection, so that a time field added to State later is covered too.
func timeFields(v reflect.Value, path string, out map[string]*time.Time) {
	switch v.Kind() {
	case reflect.Pointer:
		timeFields(v.Elem(), path, out)
	case reflect.Struct:
		if t, ok := v.Addr().Interface().(*time.Time); ok {
			out[path] = t
			return
		}
		for i := range v.NumField() {
			timeFields(v.Field(i), path+"."+v.Type().Field(i).Name, out)
		}
	case reflect.Slice:
		for i := range v.Len() {
			timeFields(v.Index(i), path+"["+string(rune('0'+i))+"]", out)
		}
	}
}

// Shift moves every time a State holds, and leaves unset ones unset.
func TestShiftMovesEveryTime(t *testing.T) {
	t.Parallel()
	s := throttle.State{Admitted: make([]throttle.Admission, 3)}
	fields := map[string]*time.Time{}
	timeFields(reflect.ValueOf(&s), "State", fields)
	if len(fields) < 10 {
		t.Fatalf("found %d time fields, expected every one of State's: %v", len(fields), fields)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	want := map[string]time.Time{}
	i := 0
	for name, f := range fields {
		if name == "State.ProbeAt" {
			continue // left unset: it must stay unset
		}
		i++
		*f = t0.Add(time.Duration(i) * time.Second)
		want[name] = f.Add(-90*time.Minute - 2*time.Microsecond)
	}

	s.Shift(-90*time.Minute - 2*time.Microsecond - 700*time.Nanosecond)

	for name, f := range fields {
		if w, ok := want[name]; ok && !f.Equal(w) {
			t.Errorf("%s = %v, want %v", name, *f, w)
		}
		if _, ok := want[name]; !ok && !f.IsZero() {
			t.Errorf("%s = %v, want it left unset", name, *f)
		}
	}
}
