"""Checks goldens.json against Python's Jinja2, the engine transformers uses.

Renders conversations.json in an environment set up as transformers'
_compile_jinja_template does (trim_blocks, lstrip_blocks, loopcontrols, the
json.dumps tojson filter, raise_exception, strftime_now) and exits non-zero if
any result differs from goldens.json. Needs only Jinja2 (Debian:
python3-jinja2):

    python3 inference/chat/testdata/check_goldens_jinja2.py
"""
import json, os, sys, datetime
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
T = os.path.dirname(os.path.abspath(__file__))
CHATML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
now = [None]
def raise_exception(message): raise jinja2.exceptions.TemplateError(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def strftime_now(fmt): return (now[0] or datetime.datetime.now()).strftime(fmt)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters['tojson'] = tojson
env.globals['raise_exception'] = raise_exception
env.globals['strftime_now'] = strftime_now
conv = json.load(open(T + '/conversations.json'))
gold = json.load(open(T + '/goldens.json'))['goldens']
bad = 0
for c in conv['cases']:
    tc = json.load(open(f"{T}/models/{c['model']}/tokenizer_config.json"))
    src = tc.get('chat_template') or CHATML
    tok = lambda v: v['content'] if isinstance(v, dict) else v
    special = {k: tok(tc[k]) for k in ['bos_token','eos_token','pad_token','unk_token'] if tc.get(k)}
    kw = dict(special)
    if 'enable_thinking' in c: kw['enable_thinking'] = c['enable_thinking']
    kw.update(c.get('extra', {}))
    now[0] = datetime.datetime.fromisoformat(c['now'].replace('Z','+00:00')) if c.get('now') else None
    key = c['model'] + '/' + c['name']
    try:
        out = {'text': env.from_string(src).render(messages=c['messages'], tools=c.get('tools'), documents=None, add_generation_prompt=c['add_generation_prompt'], **kw)}
    except jinja2.exceptions.TemplateError as e:
        out = {'error': str(e)}
    if out != gold[key]:
        bad += 1
        print('DIFF', key, json.dumps(out)[:300], json.dumps(gold[key])[:300])
print(f"{len(conv['cases'])} cases, {bad} differ from goldens.json (Jinja2 {jinja2.__version__})")
sys.exit(1 if bad else 0)
