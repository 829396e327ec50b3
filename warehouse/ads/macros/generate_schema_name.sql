{#- Models go to the schema their folder names (staging, ads), not <target schema>_<name>. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ (custom_schema_name or target.schema) | trim }}
{%- endmacro %}
