package rules

// publicSuffixes are multi-label suffixes under which anyone can get a
// name, so a wildcard over one (*.github.io) would allow every attacker's
// site. It is a short list of the common ones, not the Public Suffix List:
// a wildcard over a single label (*.com, *.io) is refused separately, and
// rules are written by people, not taken from the sandbox.
var publicSuffixes = map[string]bool{
	// Second-level country domains.
	"co.uk": true, "org.uk": true, "ac.uk": true, "gov.uk": true, "me.uk": true, "ltd.uk": true, "plc.uk": true, "net.uk": true,
	"com.au": true, "net.au": true, "org.au": true, "edu.au": true, "gov.au": true,
	"co.jp": true, "ne.jp": true, "or.jp": true, "ac.jp": true, "go.jp": true,
	"co.nz": true, "net.nz": true, "org.nz": true,
	"com.br": true, "net.br": true, "org.br": true, "gov.br": true,
	"com.cn": true, "net.cn": true, "org.cn": true, "gov.cn": true, "edu.cn": true,
	"co.in": true, "net.in": true, "org.in": true, "gov.in": true, "ac.in": true,
	"co.kr": true, "co.za": true, "co.il": true, "co.id": true, "co.th": true,
	"com.mx": true, "com.tw": true, "com.hk": true, "com.sg": true, "com.tr": true,
	"com.ar": true, "com.my": true, "com.ph": true, "com.vn": true, "com.ua": true,
	// Hosting platforms that give every customer a subdomain.
	"github.io": true, "gitlab.io": true, "herokuapp.com": true, "appspot.com": true,
	"cloudfront.net": true, "amazonaws.com": true, "azurewebsites.net": true,
	"azureedge.net": true, "cloudapp.net": true, "blob.core.windows.net": true,
	"vercel.app": true, "netlify.app": true, "pages.dev": true, "workers.dev": true,
	"r2.dev": true, "web.app": true, "firebaseapp.com": true, "blogspot.com": true,
	"fly.dev": true, "onrender.com": true, "ngrok.io": true, "ngrok-free.app": true,
	"trycloudflare.com": true, "glitch.me": true, "replit.dev": true,
}
