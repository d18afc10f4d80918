package manager

// Template resolves a template name of a compatibility API (E2B's
// templateID): a named policy first, then a named image. "" and "base" are
// the default sandbox. ok is false when nothing of that name is configured.
func (m *Manager) Template(name string) (policyName, image string, ok bool) {
	if name == "" || name == "base" {
		return "", "", true
	}
	if _, found := m.cfg.Policies[name]; found {
		return name, "", true
	}
	if _, found := m.cfg.Images[name]; found {
		return "", name, true
	}
	return "", "", false
}
