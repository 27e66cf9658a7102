package scrape

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The boot clock this node reads: one boot's ID, and a clock that only moves forward.
func TestReadBootClock(t *testing.T) {
	a, err := ReadBootClock()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	b, err := ReadBootClock()
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == "" || a.ID != b.ID {
		t.Errorf("boot IDs %q then %q, want one non-empty ID", a.ID, b.ID)
	}
	if a.Since <= 0 || b.Since-a.Since < 10*time.Millisecond {
		t.Errorf("boot clock %v then %v, 10ms apart", a.Since, b.Since)
	}
}

// Every time the state file holds moves with a wall-clock step: a field named "…_unix_nano" that shift does
// not move would come back minutes off after `date -s`.
func TestShiftMovesEveryTime(t *testing.T) {
	const step = 7 * time.Minute
	var b stateBody
	fill(reflect.ValueOf(&b).Elem())
	before := times(reflect.ValueOf(b), "")
	b.shift(step)
	after := times(reflect.ValueOf(b), "")
	if len(before) < 10 {
		t.Fatalf("found %d times in the state body, want every one: %v", len(before), before)
	}
	for name, v := range before {
		if after[name] != v+int64(step) {
			t.Errorf("%s: %d after the shift, want %d", name, after[name], v+int64(step))
		}
	}
}

// fill gives every int64 field 1e18 and every slice and pointer one element, recursively.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Int64:
		v.SetInt(1e18)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	}
}

// times lists the fields whose JSON name ends in _unix_nano, by path.
func times(v reflect.Value, path string) map[string]int64 {
	out := map[string]int64{}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name := path + "." + f.Name
			if tag := strings.Split(f.Tag.Get("json"), ",")[0]; strings.HasSuffix(tag, "_unix_nano") {
				out[name] = v.Field(i).Int()
				continue
			}
			maps.Copy(out, times(v.Field(i), name))
		}
	case reflect.Slice:
		for i := range v.Len() {
			maps.Copy(out, times(v.Index(i), path+"[]"))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			maps.Copy(out, times(v.Elem(), path))
		}
	}
	return out
}
