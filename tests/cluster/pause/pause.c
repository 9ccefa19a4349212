/* The pod sandbox's process: sleeps until INT or TERM and reaps children.
 * The same job as Kubernetes' build/pause/linux/pause.c, kept tiny and static
 * because no registry (so no registry.k8s.io/pause) is reachable here. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { _exit(0); }

static void on_child(int sig) {
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0)
    return 1;
  for (;;)
    pause();
}
