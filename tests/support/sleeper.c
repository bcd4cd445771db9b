/* A process that does nothing until killed, whatever its argv: the test suite starts it under
 * any command line (secrets, newlines, invalid UTF-8, 100,000-character arguments) so that the
 * agent reads that command line from the real /proc/<pid>/cmdline. */
#include <unistd.h>

int main(void) {
    for (;;) pause();
}
