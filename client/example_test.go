package client_test

// These examples need a running daemon (`airlock serve`): they compile but
// do not run as tests (no "Output:" lines).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func Example() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{
		Labels:         map[string]string{"agent": "demo"},
		TimeoutSeconds: 600,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)

	res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo hello; exit 3"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
}

func ExampleNew() {
	// Over TCP, with a key made by `airlock keys create` on the daemon's host.
	c, err := client.New("http://127.0.0.1:7070", os.Getenv("AIRLOCK_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Ready(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func ExampleError() {
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.GetSandbox(context.Background(), "sb-0123456789abcdef")
	var ae *client.Error
	switch {
	case errors.Is(err, client.ErrNotFound):
		fmt.Println("no such sandbox")
	case errors.Is(err, client.ErrExhausted) && errors.As(err, &ae):
		fmt.Println("busy; try again in", ae.RetryAfter)
	case err != nil:
		log.Fatal(err)
	}
}

func ExampleClient_FollowOutput() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	id := "sb-0123456789abcdef"
	p, err := c.StartProcess(ctx, id, &api.ExecRequest{Argv: []string{"make", "test"}})
	if err != nil {
		log.Fatal(err)
	}
	// Without stdin: let the process read end-of-file.
	if err := c.CloseStdin(ctx, id, p.ID); err != nil {
		log.Fatal(err)
	}
	err = c.FollowOutput(ctx, id, p.ID, "", func(ev api.OutputEvent) error {
		switch ev.Kind {
		case api.EventStdout:
			os.Stdout.Write(ev.Data)
		case api.EventStderr:
			os.Stderr.Write(ev.Data)
		case api.EventLost:
			fmt.Fprintf(os.Stderr, "[%d bytes of %s lost]\n", ev.Bytes, ev.Stream)
		case api.EventExit:
			if ev.ExitCode != nil {
				fmt.Println("exit status", *ev.ExitCode)
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_Output() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	// What the process printed so far, as Server-Sent Events.
	s, err := c.Output(ctx, "sb-0123456789abcdef", "p1", client.OutputOptions{SSE: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %q\n", ev.Kind, ev.Data)
	}
	fmt.Println("resume with cursor", s.Cursor())
}

func ExampleClient_WaitProcess() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	p, err := c.WaitProcess(ctx, "sb-0123456789abcdef", "p1", 10*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if p.State == api.ProcessExited && p.ExitCode != nil {
		fmt.Println("exit status", *p.ExitCode)
	} else {
		fmt.Println("still running")
	}
}

func ExampleClient_WriteStdin() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	id := "sb-0123456789abcdef"
	p, err := c.StartProcess(ctx, id, &api.ExecRequest{Argv: []string{"wc", "-l"}})
	if err != nil {
		log.Fatal(err)
	}
	// Streamed, then stdin is closed.
	if err := c.WriteStdin(ctx, id, p.ID, strings.NewReader("a\nb\nc\n"), true); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_PTY() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.PTY(ctx, "sb-0123456789abcdef", api.PTYStart{
		ExecRequest: api.ExecRequest{Argv: []string{"bash"}},
		Cols:        80, Rows: 24,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	go io.Copy(s, os.Stdin)
	io.Copy(os.Stdout, s)
	exit, err := s.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit status", exit.ExitCode)
}

func ExampleClient_WriteFile() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	id := "sb-0123456789abcdef"
	f, err := os.Open("main.py")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := c.WriteFile(ctx, id, "main.py", 0o644, f); err != nil {
		log.Fatal(err)
	}
	r, info, err := c.ReadFile(ctx, id, "/workspace/main.py", client.DownloadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	fmt.Println(info.Size, "bytes")
}

func ExampleClient_Upload() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	id := "sb-0123456789abcdef"
	// ./project lands at /workspace/project.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(client.TarDir(pw, "project")) }()
	if err := c.Upload(ctx, id, "/workspace", pr); err != nil {
		log.Fatal(err)
	}
	// And back, as ./project-out (at most 100 MiB; links that lead out
	// of the tree are left out and listed).
	x, err := c.DownloadTo(ctx, id, "/workspace/project", "project-out", client.DownloadOptions{MaxSize: 100 << 20})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range x.SkippedLinks {
		log.Printf("skipped %s -> %s", l.Name, l.Target)
	}
}

func ExampleClient_AllSandboxes() {
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	sbs, err := c.AllSandboxes(context.Background(), client.ListOptions{
		States: []string{api.StateRunning, api.StatePaused},
		Labels: map[string]string{"agent": "demo"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range sbs {
		fmt.Println(sb.ID, sb.State)
	}
}

func ExampleClient_FollowNetwork() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	// Print every denied connection of the sandbox as it happens, until the
	// sandbox ends.
	denied := false
	err = c.FollowNetwork(ctx, "sb-0123456789abcdef", client.NetworkQuery{Allowed: &denied}, func(ev api.NetworkEvent) error {
		fmt.Printf("%s denied %s:%d (%s)\n", ev.Time.Format(time.TimeOnly), ev.Host, ev.Port, ev.Rule)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_SetNetworkPolicy() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	id := "sb-0123456789abcdef"
	// Read, modify, write: allow one more host. Open connections the new
	// policy denies are closed.
	np, err := c.NetworkPolicy(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	np.Allow = append(np.Allow, "api.github.com")
	if _, err := c.SetNetworkPolicy(ctx, id, *np); errors.Is(err, client.ErrInvalid) {
		fmt.Println("bad rule:", err)
	} else if err != nil {
		log.Fatal(err)
	}
}
