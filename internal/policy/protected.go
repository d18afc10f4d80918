package policy

// defaultProtected lists the workspace paths that stay read-only inside the
// sandbox unless a policy removes them (filesystem.protect.remove). They
// are files that something outside the sandbox later executes or obeys
// with the user's full privileges: a sandboxed agent that could write them
// could escape the sandbox the next time the user opens a shell, runs git,
// opens an editor or starts another agent in the workspace. Paths are
// relative to the workspace, cleaned, without a trailing slash; a directory
// entry protects everything beneath it.
//
// Keep the list sorted by topic; ProtectedPaths sorts the result.
var defaultProtected = []struct{ path, reason string }{
	// Shell startup files: run by every new shell when the workspace is (or
	// is later used as) a home directory.
	{".bashrc", "bash interactive startup file"},
	{".bash_profile", "bash login startup file"},
	{".bash_login", "bash login startup file"},
	{".bash_logout", "run by bash when a login shell exits"},
	{".profile", "POSIX shell login startup file"},
	{".zshrc", "zsh interactive startup file"},
	{".zshenv", "read by every zsh, even non-interactive ones"},
	{".zprofile", "zsh login startup file"},
	{".zlogin", "zsh login startup file"},
	{".cshrc", "csh startup file"},
	{".tcshrc", "tcsh startup file"},
	{".config/fish", "fish configuration and functions"},

	// Git: hooks and configuration run commands on the host when the user
	// runs git in the workspace.
	{".git/hooks", "hooks run on commit, checkout, merge, push"},
	{".git/config", "core.hooksPath, core.fsmonitor, core.sshCommand, filters and aliases run commands"},
	{".git/commondir", "points git at another directory's config and hooks"},
	{".git/config.worktree", "per-worktree configuration: the same commands as .git/config"},
	{".git/worktrees", "linked worktrees' configuration and commondir"},
	{".git/modules", "submodules' repositories, with their own config and hooks"},
	{".gitmodules", "submodule URLs and update commands"},
	// The same settings for every repository, when the workspace is (or is
	// later used as) a home directory; ssh's config runs ProxyCommand.
	{".gitconfig", "the user's git configuration: core.fsmonitor, core.hooksPath, aliases"},
	{".config/git", "the user's git configuration (XDG): config, attributes, hooks"},
	{".ssh", "ssh client configuration (ProxyCommand, LocalCommand) and authorized keys"},

	// CI: workflows run with the repository's secrets once pushed.
	{".github/workflows", "GitHub Actions workflows run with repository secrets"},

	// Editors, IDEs and environment managers.
	{".vscode", "VS Code tasks, launch configurations and settings that run commands"},
	{".idea", "JetBrains run configurations and settings"},
	{".devcontainer", "dev container definition: image, mounts, postCreateCommand"},
	{".envrc", "direnv runs it on entering the directory"},

	// AI agents: settings, hooks, permissions and MCP servers of the agents
	// the user runs later, possibly outside the sandbox.
	{".claude", "Claude Code settings, hooks and permissions"},
	{".mcp.json", "MCP server commands started by agents and editors"},
	{".cursor", "Cursor settings, rules and MCP servers"},
	{".aider.conf.yml", "aider configuration (lint/test commands)"},
	{".continue", "Continue configuration and MCP servers"},
	{".windsurf", "Windsurf settings, rules and workflows"},
	{".codex", "OpenAI Codex CLI configuration"},
	{".gemini", "Gemini CLI settings and MCP servers"},
}
