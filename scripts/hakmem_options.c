/* `hakmem options`: every HAKMEM_* option with its default and the value
 * the library takes from this environment. Installed beside the launcher
 * (libexec/hakmem/) and run with the library preloaded, so the table and
 * the parsing are the library's own (hak_options_write), not a copy.
 *
 *   hakmem-options          aligned table with a header
 *   hakmem-options --tsv    the library's lines as they are: NAME, default,
 *                           current value, meaning, separated by tabs */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"

#define MAX_ROWS 256
#define NCOLS 4

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--tsv") == 0) {
    fflush(stdout);
    hak_options_write(1);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: %s [--tsv]\n", argv[0]);
    return 2;
  }
  FILE *tmp = tmpfile();
  if (tmp == NULL) {
    perror("hakmem options: tmpfile");
    return 1;
  }
  hak_options_write(fileno(tmp));
  rewind(tmp);
  static char *cell[MAX_ROWS][NCOLS];
  size_t width[NCOLS] = {strlen("OPTION"), strlen("DEFAULT"), strlen("CURRENT"), 0};
  int rows = 0;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, tmp)) > 0 && rows < MAX_ROWS) {
    if (line[len - 1] == '\n') line[len - 1] = '\0';
    char *rest = strdup(line);
    if (rest == NULL) return 1;
    for (int c = 0; c < NCOLS; c++) {
      cell[rows][c] = rest != NULL ? rest : (char *)"";
      char *tab = c < NCOLS - 1 && rest != NULL ? strchr(rest, '\t') : NULL;
      if (tab != NULL) *tab = '\0';
      rest = tab != NULL ? tab + 1 : NULL;
      if (strlen(cell[rows][c]) > width[c]) width[c] = strlen(cell[rows][c]);
    }
    rows++;
  }
  free(line);
  fclose(tmp);
  printf("%-*s  %-*s  %-*s  %s\n", (int)width[0], "OPTION", (int)width[1], "DEFAULT", (int)width[2], "CURRENT",
         "MEANING");
  for (int r = 0; r < rows; r++)
    printf("%-*s  %-*s  %-*s  %s\n", (int)width[0], cell[r][0], (int)width[1], cell[r][1], (int)width[2],
           cell[r][2], cell[r][3]);
  return rows > 0 ? 0 : 1;
}
