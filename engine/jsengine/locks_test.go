package jsengine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLockOrderNamesEveryLock holds the package documentation's lock order
// to the code: every sync.Mutex or sync.RWMutex field of a struct of the
// package is named there as Type.field, and every Type.field named there
// for a struct of the package is one of its fields. A lock added without
// a place in the order fails here.
func TestLockOrderNamesEveryLock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	fields := map[string]map[string]bool{} // struct type -> its fields
	var mutexes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			fs := map[string]bool{}
			fields[ts.Name.Name] = fs
			for _, fl := range st.Fields.List {
				for _, id := range fl.Names {
					fs[id.Name] = true
					if isMutex(fl.Type) {
						mutexes = append(mutexes, ts.Name.Name+"."+id.Name)
					}
				}
				if len(fl.Names) == 0 { // embedded: the field is named after its type
					if id, ok := fl.Type.(*ast.Ident); ok {
						fs[id.Name] = true
					}
				}
			}
			return true
		})
	}
	if len(mutexes) < 10 {
		t.Fatalf("found only %d mutexes (%v): the parse is broken", len(mutexes), mutexes)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), "// # Lock order")
	if i < 0 {
		t.Fatal(`doc.go has no "# Lock order" section`)
	}
	order := strings.Join(strings.Fields(strings.ReplaceAll(string(doc[i:]), "//", " ")), " ")
	for _, m := range mutexes {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(m) + `\b`).MatchString(order) {
			t.Errorf("lock %s is not in doc.go's lock order", m)
		}
	}
	for _, ref := range regexp.MustCompile(`\b([A-Za-z]+)\.([A-Za-z]+)\b`).FindAllStringSubmatch(order, -1) {
		if fs, ok := fields[ref[1]]; ok && ref[2] != "go" && !fs[ref[2]] {
			t.Errorf("doc.go's lock order names %s, which %s does not have", ref[0], ref[1])
		}
	}
}

func isMutex(e ast.Expr) bool {
	se, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := se.X.(*ast.Ident)
	return ok && x.Name == "sync" && (se.Sel.Name == "Mutex" || se.Sel.Name == "RWMutex")
}
