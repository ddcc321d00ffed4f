// AK_ASSERT (tensor/error.hpp): a broken invariant of the library aborts with
// "attnkit: internal error at FILE:LINE: message" on standard error; a holding one says nothing.
// doctest cannot catch an abort, so each case runs in a forked child.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "attnkit/tensor/error.hpp"

namespace {

struct ChildEnd {
  bool aborted = false;  // ended by SIGABRT
  int exit_code = -1;    // else its exit status
  std::string err;       // what it wrote on standard error
};

// Runs `body` in a child whose standard error is captured; the child exits 0 when body returns.
ChildEnd run_in_child(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    std::signal(SIGABRT, SIG_DFL);  // not doctest's crash handler: the abort ends the child
    body();
    _exit(0);
  }
  close(fds[1]);
  ChildEnd end;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) break;
    end.err.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  end.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  return end;
}

}  // namespace

TEST_CASE("AK_ASSERT: a broken invariant aborts, naming the file and line") {
  const int line = __LINE__ + 1;
  const ChildEnd end = run_in_child([] { AK_ASSERT(1 + 1 == 3, "the sum is {}", 1 + 1); });
  CHECK(end.aborted);
  const std::string want = "attnkit: internal error at " + std::string(__FILE__) + ":" + std::to_string(line) +
                           ": the sum is 2\n";
  CHECK(end.err == want);
}

TEST_CASE("AK_ASSERT: silent when the condition holds") {
  const ChildEnd end = run_in_child([] {
    AK_ASSERT(1 + 1 == 2, "the sum is {}", 1 + 1);
  });
  CHECK_FALSE(end.aborted);
  CHECK(end.exit_code == 0);
  CHECK(end.err.empty());
}

TEST_CASE("AK_ASSERT is not AK_CHECK: bad input still throws attnkit::Error") {
  CHECK_THROWS_AS(AK_CHECK(false, "bad input {}", 1), attnkit::Error);
}
