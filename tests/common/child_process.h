// RunInChild: a test body in a forked child with a time limit, for cases whose failure is a crash,
// std::terminate or an endless loop, so that the failure is reported (and the rest of the suite
// runs) instead of taking the test process down. Header-only: used by black-box tests and by the
// white-box tests that link the core statically.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <string>

namespace attnrt_test {

// Runs body(&output) in a child killed after `seconds`. Returns "" when body returned 0, else
// "child exited with N" or "child killed by signal S". What the child wrote to its string comes
// back in *output.
inline std::string RunInChild(int seconds, const std::function<int(std::string*)>& body,
                              std::string* output = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(seconds));
    std::string out;
    const int code = body(&out);
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(code);
  }
  close(fds[1]);
  std::string received;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) {
    received.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (output != nullptr) *output = received;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return "fork/waitpid failed";
  if (WIFSIGNALED(status)) {
    return "child killed by signal " + std::to_string(WTERMSIG(status)) +
           (WTERMSIG(status) == SIGALRM ? " (time limit)" : "");
  }
  const int code = WEXITSTATUS(status);
  return code == 0 ? "" : "child exited with " + std::to_string(code);
}

}  // namespace attnrt_test
