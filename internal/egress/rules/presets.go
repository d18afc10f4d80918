package rules

import (
	"slices"
	"strings"
)

// Presets are named lists of rules for common services, referenced in
// allow rules as "@" + name ("@pypi"). Compile expands them. They are data:
// every rule must parse with ParsePattern, which the tests check.
var Presets = map[string][]string{
	"pypi": {
		"pypi.org:443",
		"files.pythonhosted.org:443",
	},
	"npm": {
		"registry.npmjs.org:443",
		"registry.yarnpkg.com:443",
	},
	"go": {
		"proxy.golang.org:443",
		"sum.golang.org:443",
	},
	"github": {
		"github.com:443",
		"api.github.com:443",
		"codeload.github.com:443",
		"objects.githubusercontent.com:443",
		"raw.githubusercontent.com:443",
	},
}

// PresetNames returns the names of the Presets, sorted, without the "@".
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for name := range Presets {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// expandPreset returns the patterns of the preset that ref ("@name")
// names.
func expandPreset(ref string) ([]Pattern, error) {
	rules, ok := Presets[strings.ToLower(ref[1:])]
	if !ok {
		return nil, invalidf("egress rule %q: unknown preset (known: @%s)", ref, strings.Join(PresetNames(), ", @"))
	}
	pats := make([]Pattern, 0, len(rules))
	for _, r := range rules {
		p, err := ParsePattern(r)
		if err != nil {
			return nil, invalidf("egress rule %q: preset rule: %v", ref, err)
		}
		pats = append(pats, p)
	}
	return pats, nil
}
