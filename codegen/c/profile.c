/* codegen/c/profile.c - profile_main.c of a one-stage cpu build: the unit table of
 * stage 0 (the same units emit.c numbers with PK_UNIT) and a main that hands it to
 * libpipert's profiler (runtime/pipert_profile.h). */
#include <stdio.h>
#include <stdlib.h>

#include "codegen/c/cg_c.h"
#include "codegen/emit_common.h"
#include "codegen/stage.h"
#include "ir/diag.h"

int cg_c_emit_profile_main(ir_graph *g, const cg_plan *p, const cg_options *o, const cg_stage_info *si,
                           const char *dir) {
  IR_ASSERT(p->n_stages == 1);
  cg_wlayout wl;
  cg_wlayout_build(&wl, g, p, si, 0);
  cg_stage st;
  cg_stage_open(&st, g, p, o, si, &wl, cg_part(p, 0, IR_PHASE_FWD), 1, 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cg_put_header(f, g, o, "cpu", "profile_main.c: per-node timing of this one-stage build (DIR/profile)");
  fputs("#include \"pipert.h\"\n\nextern const pipert_stage_desc pipecc_stage_0;\n\n", f);
  fprintf(f, "static const int unit_n_nodes[%d] = {", st.n_units ? st.n_units : 1);
  for (int u = 0; u < st.n_units; u++) fprintf(f, "%s%d", u ? ", " : "", st.units[u].n_nodes);
  fputs(st.n_units ? "};\n\n" : "0};\n\n", f);
  fputs("static const char *const node_names[] = {\n", f);
  for (int u = 0; u < st.n_units; u++)
    for (int m = 0; m < st.units[u].n_nodes; m++) {
      fputs("  ", f);
      cg_put_cstr(f, g->nodes[st.units[u].nodes[m]].name);
      fputs(",\n", f);
    }
  fputs("  \"\"};\n\nstatic const char *const unit_labels[] = {\n", f);
  for (int u = 0; u < st.n_units; u++) {
    const cg_unit *un = &st.units[u];
    const ir_node *n = &g->nodes[un->root];
    char nm[120], lab[300];
    snprintf(lab, sizeof lab, "node %d: %s%s '%s'%s", n->index, un->n_nodes > 1 ? "fused " : "", ir_op_name(n->op),
             ir_printable(n->name, 100, nm, sizeof nm), un->alias ? " (alias)" : "");
    fputs("  ", f);
    cg_put_cstr(f, lab);
    fputs(",\n", f);
  }
  fputs("  \"\"};\n\n", f);
  fprintf(f, "static const pipert_profile_units units = {%d, unit_n_nodes, node_names, unit_labels};\n\n", st.n_units);
  fputs("int main(int argc, char **argv) { return pipert_profile_main(argc, argv, &pipecc_stage_0, &units); }\n", f);
  fclose(f);
  int rc = cg_write_file(dir, "profile_main.c", buf, len);
  free(buf);
  cg_stage_close(&st);
  cg_wlayout_free(&wl);
  return rc;
}
