// Every function the C headers declare is reachable from Go: called by the idiomatic layer
// through the generated wrappers, or by a hand-written C helper, callback or Go file of the
// internal package, or one of the few that docs/bindings.md names as C-only. A new C call without a Go binding fails here.
package shardrec

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cOnly are the C functions the Go binding deliberately does not offer (docs/bindings.md,
// "Deliberately C-only"; the *_init functions fill option structs inside the idiomatic types):
// the error text travels with each status (copied by shardrec_last_error_copy), and a dense
// tensor pointer that a concurrent reload may free is read through a pinned snapshot instead;
// the delta export without flags is superseded by shardrec_embedding_dynamic_delta_ext (the same
// delta and its flags), which DynamicDelta calls.
var cOnly = map[string]bool{"shardrec_last_error": true, "shardrec_inference_dense_tensor": true,
	"shardrec_embedding_dynamic_delta": true}

func readAll(t *testing.T, pattern string, keep func(string) bool) string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	var b strings.Builder
	for _, f := range files {
		if keep != nil && !keep(f) {
			continue
		}
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(text)
	}
	return b.String()
}

func TestEveryCFunctionIsReachable(t *testing.T) {
	headers := readAll(t, "../../capi/include/shardrec/*.h", nil)
	declared := regexp.MustCompile(`SHARDREC_API[^;{]*?\b(shardrec_\w+)\s*\(`).FindAllStringSubmatch(headers, -1)
	if len(declared) < 100 {
		t.Fatalf("found only %d declarations in the headers", len(declared))
	}
	idiomatic := readAll(t, "*.go", func(f string) bool { return !strings.HasSuffix(f, "_test.go") })
	generated := func(f string) bool { return !strings.HasPrefix(filepath.Base(f), "swig_shardrec") }
	helpers := readAll(t, "internal/swig/*", generated) + readAll(t, "*.i", nil) +
		readAll(t, "../swig/*.i", nil)
	// %ignore lines name functions without calling them.
	helpers = regexp.MustCompile(`(?m)^%ignore.*$`).ReplaceAllString(helpers, "")
	for _, m := range declared {
		name := m[1]
		if cOnly[name] || strings.HasSuffix(name, "_init") {
			continue
		}
		short := strings.TrimPrefix(name, "shardrec_")
		wrapper := "swig." + strings.ToUpper(short[:1]) + short[1:]
		called := regexp.MustCompile(`\b(` + name + `|` + wrapper[len("swig."):] + `)\s*\(`)
		direct := regexp.MustCompile(`\b` + regexp.QuoteMeta(wrapper) + `\b`)
		if !direct.MatchString(idiomatic) && !called.MatchString(helpers) {
			t.Errorf("%s is not reachable from Go (no %s in the idiomatic layer, no C helper calls it)",
				name, wrapper)
		}
	}
}
