import json, statistics as st
import os; R=os.path.dirname(os.path.abspath(__file__))+'/'
L=lambda f:[json.loads(l) for l in open(R+f) if l.startswith('{')]
a=L('attn_prefill.jsonl'); n=L('attn_norope.jsonl'); o=L('ort.jsonl'); d=L('decode.jsonl'); w=L('window.jsonl')
def get(rows, **k): 
    return [r for r in rows if all(r.get(x)==v for x,v in k.items())]
for t in (1,2):
  print('threads',t)
  rat=[]
  for p in range(1,7):
    am=get(a,threads=t,**{'pass':p})[0]['median_ms']; om=get(o,threads=t,shape='llama-2k',variant='ort_gqa',**{'pass':p})[0]['ort_run_median_ms']
    nm=get(n,threads=t,**{'pass':p})[0]['median_ms']
    rat.append(om/am); print(' pass',p,'attn',am,'noRope',nm,'ort',om,'ort/attn %.2f'%(om/am))
  print(' ratio median %.2f'%st.median(rat))
  for kind in ('decode',):
    for p in range(1,7):
      r={}
      for kv in (8,32):
        for ctx in (16,4096):
          x=get(d,threads=t,kv_heads=kv,context=ctx,**{'pass':p}); r[(kv,ctx)]=x[0]['step_ms'] if x else None
      o8=get(o,threads=t,shape='decode-4k',variant='ort_gqa',kv_mode='shared',**{'pass':p})[0]['ort_run_median_ms']
      o32=get(o,threads=t,shape='decode-4k-mha',variant='ort_gqa',kv_mode='shared',**{'pass':p})[0]['ort_run_median_ms']
      c8=get(o,threads=t,shape='decode-4k',variant='ort_gqa_core',kv_mode='shared',**{'pass':p})[0]['ort_run_median_ms']
      c32=get(o,threads=t,shape='decode-4k-mha',variant='ort_gqa_core',kv_mode='shared',**{'pass':p})[0]['ort_run_median_ms']
      s='  pass %d attn kv8 %.3f kv32 %.3f ratio %.2f'%(p,r[(8,4096)],r[(32,4096)],r[(32,4096)]/r[(8,4096)])
      if r[(8,16)]:
        a8=r[(8,4096)]-r[(8,16)]; a32=r[(32,4096)]-r[(32,16)]; s+=' | attn-only kv8 %.3f kv32 %.3f ratio %.2f'%(a8,a32,a32/a8)
      s+=' | ORT block kv8 %.2f kv32 %.2f (%.2fx) node %.2f %.2f (%.2fx) | ORTblock8/attn8 %.2f'%(o8,o32,o32/o8,c8,c32,c32/c8,o8/r[(8,4096)])
      print(s)
  for p in range(1,7):
    f=get(w,threads=t,sliding_window=0,**{'pass':p})[0]['median_ms']; g=get(w,threads=t,sliding_window=512,**{'pass':p})[0]['median_ms']
    print('  window pass',p,f,g,'%.2f'%(f/g))
