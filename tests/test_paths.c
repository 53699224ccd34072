/* test_paths.c - the table of optional paths: parsing MINFER_*_DISABLE lists. */
#include "test.h"

#include "paths.h"

static const mf_path TAB[] = {
    { "graph", "decode step as a CUDA graph", 1 },
    { "pdl", "programmatic dependent launch", 1 },
    { "exp", "an experiment", 0 },
};
#define N ((int)MF_ARRAY_LEN(TAB))

int main(void) {
    int on[N];
    mf_err err = { { 0 } };
    char buf[128];

    CHECK(paths_parse(TAB, N, NULL, "V", on, &err) == MF_OK, "NULL list");
    CHECK(on[0] == 1 && on[1] == 1 && on[2] == 0, "defaults %d %d %d", on[0], on[1], on[2]);
    CHECK(paths_disabled(TAB, N, on, buf, sizeof buf) == 0 && buf[0] == 0, "nothing disabled: '%s'", buf);

    CHECK(paths_parse(TAB, N, "pdl", "V", on, &err) == MF_OK, "one name");
    CHECK(on[0] == 1 && on[1] == 0, "pdl off");
    CHECK(paths_disabled(TAB, N, on, buf, sizeof buf) == 1 && strcmp(buf, "pdl") == 0, "'%s'", buf);

    CHECK(paths_parse(TAB, N, " graph , pdl,", "V", on, &err) == MF_OK, "spaces, trailing comma");
    CHECK(on[0] == 0 && on[1] == 0, "both off");
    CHECK(paths_disabled(TAB, N, on, buf, sizeof buf) == 2 && strcmp(buf, "graph pdl") == 0, "'%s'", buf);

    CHECK(paths_parse(TAB, N, "all", "V", on, &err) == MF_OK, "all");
    CHECK(on[0] == 0 && on[1] == 0 && on[2] == 0, "all off");

    CHECK(paths_parse(TAB, N, "graph,nosuch", "MINFER_X_DISABLE", on, &err) == MF_ERR_USAGE, "unknown name");
    CHECK(strstr(err.msg, "MINFER_X_DISABLE") && strstr(err.msg, "'nosuch'") && strstr(err.msg, "graph, pdl, exp"),
          "message names the variable, the name and the valid ones: %s", err.msg);

    CHECK(paths_find(TAB, N, "exp") == 2 && paths_find(TAB, N, "gra") == -1, "find is exact");
    return test_summary("paths");
}
