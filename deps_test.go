package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/inloop/inloop"

// allowed says which project packages each layer may import, so arrows point down
// only (DESIGN.md): main -> ui -> app -> adapt -> training -> inference -> mlxbridge,
// with resources and internal as leaves every layer may use and store as a leaf
// only app may use. A package may always import packages inside its own tree.
var allowed = []struct {
	pkg  string // a tree, longest match wins
	may  []string
	fyne bool
}{
	{"", []string{"ui", "app", "internal"}, true}, // main
	{"ui", []string{"app", "resources", "internal"}, true},
	{"app", []string{"adapt", "training", "inference", "store", "mlxbridge", "resources", "internal"}, false},
	{"adapt", []string{"training", "inference", "mlxbridge", "resources", "internal"}, false},
	{"training", []string{"inference", "mlxbridge", "resources", "internal"}, false},
	{"inference", []string{"mlxbridge", "resources", "internal"}, false},
	{"mlxbridge", []string{"resources", "internal"}, false},
	{"store", nil, false},
	{"resources", nil, false},
	{"internal", nil, false}, // small helpers with no domain: they import no project package outside internal
}

func rule(rel string) (tree string, may []string, fyne bool) {
	best := -1
	for i, r := range allowed {
		if (r.pkg == "" || rel == r.pkg || strings.HasPrefix(rel, r.pkg+"/")) && (best < 0 || len(r.pkg) > len(allowed[best].pkg)) {
			best = i
		}
	}
	r := allowed[best]
	return r.pkg, r.may, r.fyne
}

func inTree(rel, tree string) bool { return rel == tree || strings.HasPrefix(rel, tree+"/") }

// isTestHelper reports a package that exists for tests (mlxbridge/bridgetest,
// inference/inferencetest): go list's Imports leaves out _test.go files, so any
// import of one seen here is from shipped code.
func isTestHelper(rel string) bool {
	base := rel[strings.LastIndex(rel, "/")+1:]
	return base != "test" && strings.HasSuffix(base, "test")
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{join .Deps \",\"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		rel := strings.TrimPrefix(strings.TrimPrefix(parts[0], module), "/")
		tree, may, fyne := rule(rel)
		n++
		for _, imp := range strings.Split(parts[1], ",") {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			irel := strings.TrimPrefix(imp, module+"/")
			ok := tree != "" && inTree(irel, tree)
			if itree, _, _ := rule(irel); ok && itree != tree && !inTree(tree, itree) {
				ok = false // a tree nested in another keeps its own rules
			}
			for _, m := range may {
				ok = ok || inTree(irel, m)
			}
			if !ok {
				t.Errorf("%s imports %s: not allowed by DESIGN.md's layering", parts[0], imp)
			}
			if isTestHelper(irel) && !isTestHelper(rel) {
				t.Errorf("%s imports %s: test helpers (bridgetest, inferencetest) are for _test.go files", parts[0], imp)
			}
		}
		if !fyne {
			for _, d := range strings.Split(parts[2], ",") {
				if strings.HasPrefix(d, "fyne.io/") {
					t.Errorf("%s depends on %s: only ui and main may use Fyne", parts[0], d)
					break
				}
			}
		}
	}
	if n < 3 {
		t.Fatalf("go list found only %d packages", n)
	}
}

func TestImportRuleTable(t *testing.T) {
	for _, c := range []struct {
		pkg, tree string
	}{
		{"", ""}, {"mlxbridge/cpu", "mlxbridge"}, {"adapt/ttt", "adapt"}, {"adapt", "adapt"},
		{"inference/llama", "inference"}, {"inference/inferencetest", "inference"}, {"ui", "ui"},
		{"store", "store"}, {"internal/atomicfile", "internal"}, {"mlxbridge/cpu/internal/qmm", "mlxbridge"},
	} {
		if tree, _, _ := rule(c.pkg); tree != c.tree {
			t.Errorf("rule(%q) = %q, want %q", c.pkg, tree, c.tree)
		}
	}
}
