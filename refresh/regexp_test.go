package refresh

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoRegexpCompiledPerCall: the package's regular expressions are
// compiled once, in package variables, never inside a function (where every
// call would compile them again).
func TestNoRegexpCompiledPerCall(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if ok && strings.HasPrefix(sel.Sel.Name, "MustCompile") || ok && sel.Sel.Name == "Compile" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "regexp" {
						t.Errorf("%s: %s compiles a regexp on every call: make it a package variable", fset.Position(sel.Pos()), fn.Name.Name)
					}
				}
				return true
			})
		}
	}
}
