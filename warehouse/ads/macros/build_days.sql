{#- The days this run builds (--vars days: [...]); a mart reads and writes only these partitions. -#}
{% macro in_build_days(column) -%}
    {%- set days = var('days') -%}
    {%- if days -%}
    {{ column }} in ({% for day in days %}date '{{ day }}'{% if not loop.last %}, {% endif %}{% endfor %})
    {%- else -%}
    false
    {%- endif -%}
{%- endmacro %}
