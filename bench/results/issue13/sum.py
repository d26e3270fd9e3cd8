import json, statistics as st, collections, glob
import os; R=os.path.dirname(os.path.abspath(__file__))+'/'
def load(f):
    try: return [json.loads(l) for l in open(R+f) if l.startswith('{')]
    except FileNotFoundError: return []
def show(title, rows, key, tfield, minf, medf, extra=None):
    g=collections.defaultdict(list)
    for r in rows: g[key(r)+(r[tfield],)].append(r)
    print('##',title)
    for k in sorted(g):
        rs=g[k]
        mins=[r[minf] for r in rs]; meds=[r[medf] for r in rs]
        print(k, 'n=%d min %.4g  median-of-medians %.4g  best-median %.4g  medians %s'%(len(rs),min(mins),st.median(meds),min(meds),[round(m,3) for m in meds]), extra(rs) if extra else '')
show('attn prefill llama-2k', load('attn_prefill.jsonl'), lambda r:(r['shape'],), 'threads','min_ms','median_ms', lambda rs: 'flops %.4g'%rs[0]['flops'])
show('attn prefill llama-2k no rope', load('attn_norope.jsonl'), lambda r:(r['shape'],), 'threads','min_ms','median_ms')
o=load('ort.jsonl')
show('ort (ORT-internal model_run)', o, lambda r:(r['shape'],r['variant'],r['kv_mode']), 'threads','ort_run_min_ms','ort_run_median_ms', lambda rs: 'ok=%s shared_ok=%s'%(all(r.get('ok') for r in rs), [r.get('shared_ok') for r in rs]))
show('ort (JS wall)', o, lambda r:(r['shape'],r['variant'],r['kv_mode']), 'threads','min_ms','median_ms')
d=load('decode.jsonl')
for r in d: r['min']=r['step_ms']
show('attn decode step (median per run; min over runs of the median)', d, lambda r:('kv',r['kv_heads'],'ctx',r['context']), 'threads','step_ms','step_ms', lambda rs: 'kvGB/s %s'%[round(r['kv_gb_per_s'],1) for r in rs])
show('window', load('window.jsonl'), lambda r:('win',r['sliding_window']), 'threads','min_ms','median_ms', lambda rs: 'gflops %s'%[round(r['gflops'],1) for r in rs])
