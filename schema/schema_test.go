package schema

import (
	"fmt"
	"testing"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"
)

// TestEveryFieldHasADocComment keeps the schema self-documenting: every
// field a user can write carries a doc comment, which `kcompile explain`
// and editors show. Fields inside `if` comprehensions only refine a field
// documented where it is declared.
func TestEveryFieldHasADocComment(t *testing.T) {
	for _, v := range Versions() {
		files, err := Files(v)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("schema %s has no files", v.APIVersion)
		}
		for _, name := range Names(files) {
			f, err := parser.ParseFile(name, files[name], parser.ParseComments)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			count := 0
			// skip is true inside comprehensions (fields there refine one
			// documented where it is declared) and for the inner fields
			// of a chain a: b: c, documented by the comment on a.
			var walk func(n ast.Node, skip bool)
			walk = func(n ast.Node, skip bool) {
				switch x := n.(type) {
				case *ast.File:
					for _, d := range x.Decls {
						walk(d, false)
					}
				case *ast.Field:
					if _, pattern := x.Label.(*ast.ListLit); pattern {
						// A pattern constraint ([string]: #Node) is
						// documented by the field that holds it.
						walk(x.Value, skip)
						return
					}
					count++
					if !skip && !hasDoc(x) {
						t.Errorf("%s: field %s has no doc comment", x.Pos(), label(x))
					}
					if st, ok := x.Value.(*ast.StructLit); ok && !st.Lbrace.IsValid() {
						for _, d := range st.Elts {
							walk(d, true)
						}
						return
					}
					walk(x.Value, skip && !isStruct(x.Value))
				case *ast.StructLit:
					for _, d := range x.Elts {
						walk(d, skip)
					}
				case *ast.Comprehension:
					walk(x.Value, true)
				case *ast.BinaryExpr:
					walk(x.X, skip)
					walk(x.Y, skip)
				case *ast.EmbedDecl:
					walk(x.Expr, skip)
				}
			}
			walk(f, false)
			if count == 0 {
				t.Errorf("%s declares no fields", name)
			}
		}
	}
}

// isStruct reports a braced struct, whose fields need their own docs even
// at the end of a chain.
func isStruct(n ast.Node) bool {
	st, ok := n.(*ast.StructLit)
	return ok && st.Lbrace.IsValid()
}

func hasDoc(f *ast.Field) bool {
	for _, cg := range ast.Comments(f) {
		if cg.Doc {
			return true
		}
	}
	return false
}

func label(f *ast.Field) string {
	name, _, err := ast.LabelName(f.Label)
	if err != nil {
		return fmt.Sprint(f.Label)
	}
	return name
}

func TestLookup(t *testing.T) {
	if _, ok := Lookup("kcompile.dev/v1alpha1"); !ok {
		t.Error("v1alpha1 is not known")
	}
	if _, ok := Lookup("kcompile.dev/v9"); ok {
		t.Error("an unknown version was found")
	}
}
