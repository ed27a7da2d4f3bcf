// The package's documentation is shardrec.go's alone: a comment right above another file's
// package clause would join it, and go doc would open with that file's summary.

package shardrec

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

func TestOnlyShardrecGoDocumentsThePackage(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil && name != "shardrec.go" {
			t.Errorf("%s: its comment above the package clause joins the package documentation", name)
		}
		if name == "shardrec.go" && (f.Doc == nil || !strings.HasPrefix(f.Doc.Text(), "Package shardrec ")) {
			t.Errorf("shardrec.go: the package documentation must open with \"Package shardrec \"")
		}
	}
}
