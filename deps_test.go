package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/inloop/inloop"

// allowed says which project packages each layer may import, so arrows point down
// only (DESIGN.md): main -> ui -> app -> {training, inference, store} -> mlxbridge.
// A package may always import packages inside its own tree, except where a deeper
// rule is listed (inference/adapt sits above training, the rest of inference below).
var allowed = []struct {
	pkg  string // a tree, longest match wins
	may  []string
	fyne bool
}{
	{"", []string{"ui", "app"}, true}, // main
	{"ui", []string{"app", "resources"}, true},
	{"app", []string{"training", "inference", "store", "mlxbridge", "resources"}, false},
	{"inference/adapt", []string{"training", "inference", "mlxbridge", "store"}, false},
	{"training", []string{"inference", "mlxbridge"}, false},
	{"inference", []string{"mlxbridge"}, false},
	{"mlxbridge", nil, false},
	{"store", nil, false},
	{"resources", nil, false},
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
				ok = false // e.g. inference may not reach up into inference/adapt
			}
			for _, m := range may {
				ok = ok || inTree(irel, m)
			}
			if !ok {
				t.Errorf("%s imports %s: not allowed by DESIGN.md's layering", parts[0], imp)
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
		{"", ""}, {"mlxbridge/cpu", "mlxbridge"}, {"inference/adapt/ttt", "inference/adapt"},
		{"inference/llama", "inference"}, {"ui", "ui"}, {"store", "store"},
	} {
		if tree, _, _ := rule(c.pkg); tree != c.tree {
			t.Errorf("rule(%q) = %q, want %q", c.pkg, tree, c.tree)
		}
	}
}
